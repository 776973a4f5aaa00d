// ParallelGrid: the ranks of a world laid out as a dp x tp x pp grid, and the communicators of
// its groups (chapter 8's 3D parallelism), with context parallelism (chapter 6, part 2) as a
// fourth dimension cp.
//
// The layout is Megatron-LM's tp-dp-pp order (torchtitan's device mesh [pp, dp, tp]): tensor
// parallelism varies fastest, so that a tp group is a run of consecutive ranks (one node's
// NVLink island), then data parallelism, and the pipeline stage is outermost:
//
//     rank = (pp x dp_size + dp) x tp_size + tp
//
//     tp = rank % tp_size,  dp = (rank / tp_size) % dp_size,  pp = rank / (tp_size x dp_size)
//
// A 2 x 2 x 2 grid (dp 2, tp 2, pp 2: 8 ranks), its two pipeline stages side by side:
//
//              pp 0 (first stage)              pp 1 (last stage)
//              tp 0    tp 1                    tp 0    tp 1
//     dp 0   [   0 ---- 1   ]  ==========>  [   4 ---- 5   ]
//                |      |                       |      |
//     dp 1   [   2 ---- 3   ]  ==========>  [   6 ---- 7   ]
//
//     ----  tp groups (same dp, pp):  {0,1} {2,3} {4,5} {6,7}
//       |   dp groups (same tp, pp):  {0,2} {1,3} {4,6} {5,7}
//     ===>  pp groups (same dp, tp):  {0,4} {1,5} {2,6} {3,7}  (activations flow 0 -> 4, ...)
//     model-parallel groups (same dp: one replica's tp x pp ranks):  {0,1,4,5} {2,3,6,7}
//     embedding groups (first and last stage of the same dp, tp, which hold the tied input
//     and output embeddings and all-reduce their gradients):       {0,4} {1,5} {2,6} {3,7}
//
// With pp > 2 the middle stages belong to no embedding group; with pp == 1 a rank is its
// first and last stage at once and its embedding group is itself alone.
//
// Context parallelism (cp > 1) is Megatron-LM's tp-cp-dp-pp order: cp sits between tp and dp,
//
//     rank = ((pp x dp_size + dp) x cp_size + cp) x tp_size + tp
//
// (with cp_size 1 the formula above). The cp ranks of one (dp, tp, pp) split one sequence and
// hold the same parameters, so a gradient is summed over dp x cp (the dp-cp group: same tp,
// pp), while the dp group proper (same tp, cp, pp) is what ZeRO shards over and each cp rank
// reads its own rows of the same samples. The model-parallel and embedding groups keep one
// (dp, cp) coordinate. A dp 2 x tp 2 x cp 2 grid (pp 1, 8 ranks):
//
//     tp groups {0,1} {2,3} {4,5} {6,7}    cp groups {0,2} {1,3} {4,6} {5,7}
//     dp groups {0,4} {1,5} {2,6} {3,7}    dp-cp groups {0,2,4,6} {1,3,5,7}
//
// All of it is derived from the grid's DeviceMesh (comm/device_mesh.h): GridShape names the
// standard mesh's four degrees, the pure functions below are its groups by purpose, and a
// ParallelGrid splits one communicator per purpose of grid_groups() from it.
//
// The pure layout functions need no communicator (mixpar-grid prints them; tests check them
// against the communicators). Every group list is of world ranks, ascending, and holds r
// (except the empty embedding group of a middle stage).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_mesh.h"
#include "comm/timed_communicator.h"

namespace mixpar {

struct GridShape {
  int dp = 1;  // data-parallel degree: model replicas
  int tp = 1;  // tensor-parallel degree: ranks sharing one layer's matrices
  int pp = 1;  // pipeline-parallel degree: stages
  int cp = 1;  // context-parallel degree: ranks sharing one sequence (chapter 6, part 2)
  int world() const { return dp * tp * pp * cp; }
  // Megatron's [pp, dp, cp, tp], any degrees (a bad one too, for mesh_text to name it).
  std::vector<MeshDim> dims() const { return standard_dims(dp, tp, cp, pp); }
  // The same as a mesh (DeviceMesh::standard); std::invalid_argument for a degree < 1.
  DeviceMesh mesh() const { return DeviceMesh(dims()); }
  // The four degrees of a mesh (1 for a dimension it lacks).
  static GridShape of(const DeviceMesh& m);
};

struct GridCoord {
  int rank = 0;  // in the world
  int dp = 0, tp = 0, pp = 0;
  int cp = 0;
};

// InputError, one line naming the numbers, unless every degree is >= 1 and
// dp x tp x pp (x cp) == world: "grid: dp 2 x tp 2 x pp 3 = 12 ranks, but the world has 8"
// (a cp > 1 is named as "x cp C").
void validate(const GridShape& shape, int world);

// A group of the grid by purpose: the dimensions it spans (DeviceMesh::group), split as a
// communicator only when the dimension `needs` is > 1 ("" = always). The embedding group
// spans pp but only the first and last stages hold it.
struct GridGroup {
  const char* name;
  std::vector<std::string> dims;
  const char* needs = "";
  bool ends_of_pipeline = false;
};
// dp, tp, pp, model_parallel (pp x tp), embedding, cp and dp_cp (dp x cp, where replicated
// parameters' gradients are summed), split in this order by every rank.
const std::vector<GridGroup>& grid_groups();

// The functions below take a shape with every degree >= 1 (else std::invalid_argument).
// ((pp x dp_size + dp) x cp_size + cp) x tp_size + tp; std::out_of_range for a coordinate
// outside the grid.
int grid_rank(const GridShape& shape, int dp, int tp, int pp, int cp = 0);
// The inverse; std::out_of_range for a rank outside [0, world).
GridCoord grid_coord(const GridShape& shape, int rank);

// The groups of rank r, as world ranks in ascending order (the order of their
// communicators' ranks).
std::vector<int> tp_group(const GridShape& shape, int r);              // same dp, cp, pp
std::vector<int> dp_group(const GridShape& shape, int r);              // same tp, cp, pp
std::vector<int> pp_group(const GridShape& shape, int r);              // same dp, tp, cp
std::vector<int> model_parallel_group(const GridShape& shape, int r);  // same dp, cp
std::vector<int> cp_group(const GridShape& shape, int r);              // same dp, tp, pp
// Where replicated parameters' gradients are summed: dp x cp ranks of the same tp, pp (the
// dp group when cp == 1).
std::vector<int> dp_cp_group(const GridShape& shape, int r);
// {first stage, last stage} of r's (dp, tp) pipeline; {r} when pp == 1; empty when r is on a
// middle stage (it belongs to no embedding group).
std::vector<int> embedding_group(const GridShape& shape, int r);

bool is_first_stage(const GridShape& shape, int r);
bool is_last_stage(const GridShape& shape, int r);
// The world rank of the previous / next pipeline stage (same dp, tp); -1 at the ends
// (no wraparound).
int pp_prev(const GridShape& shape, int r);
int pp_next(const GridShape& shape, int r);

// One rank's view of the grid over a communicator `world` (the whole world, or any group
// to be laid out as a grid: "world rank" below means the rank in it).
class ParallelGrid {
 public:
  // Collective over `world`: every rank constructs its grid with the same shape. Validates
  // the shape against world.size() (InputError), then splits `world` into the dp, tp, pp,
  // model-parallel and embedding communicators, in that order, with the parent rank as key,
  // so that each group's ranks follow the ascending world ranks of the pure lists above;
  // with cp > 1 it then splits the cp and dp-cp communicators (in that order).
  // std::logic_error if a communicator disagrees with the pure layout. `world` must outlive
  // the grid.
  ParallelGrid(Communicator& world, GridShape shape);
  // The same over any mesh (validated against world.size()); dimensions beyond the standard
  // four take part in no group of grid_groups() and must not change a rank (size 1) unless a
  // chapter splits their own groups.
  ParallelGrid(Communicator& world, DeviceMesh mesh);

  const DeviceMesh& mesh() const { return mesh_; }
  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  // This rank's coordinate on any named dimension (0 for one the mesh lacks).
  int coord(std::string_view name) const { return mesh_.coord(coord_.rank, name); }

  // The communicator of a group of grid_groups() by the dimensions it spans, in any order:
  // dimensions of size 1 are dropped from the request and from the groups, so {"dp", "cp"}
  // is the dp communicator when cp == 1. std::logic_error when no split group matches.
  Communicator& group(const std::vector<std::string>& dims) const;
  // Every group of grid_groups() by name, in that order (nullptr where not split: a middle
  // stage's embedding group, a group whose `needs` is 1).
  std::vector<std::pair<std::string, Communicator*>> groups() const;

  // The world and every group are timed (comm/timed_communicator.h) into one clock, built on
  // the thread that built the grid: the seconds this rank spent in each group's calls, by
  // group name ("world" and grid_groups()' names) and operation. Not const: communicators a
  // caller splits for itself (chapter 9's expert groups) can be timed into it too.
  CommClock& clock() const { return *clock_; }

  Communicator& world() const { return *world_; }
  Communicator& dp() const { return *dp_; }
  Communicator& tp() const { return *tp_; }
  Communicator& pp() const { return *pp_; }  // rank in it = pipeline stage = coord().pp
  Communicator& model_parallel() const { return *model_parallel_; }
  // nullptr on a middle pipeline stage; this rank alone when pp == 1.
  Communicator* embedding() const { return embedding_; }
  // The cp group: nullptr when cp == 1 (no context parallelism, nothing to split).
  Communicator* cp() const { return cp_; }
  // The group replicated parameters' gradients are summed over: dp x cp (dp() when cp == 1).
  Communicator& dp_cp() const { return dp_cp_ ? *dp_cp_ : *dp_; }

  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == shape_.pp - 1; }
  // Neighbouring stages as world ranks, -1 at the ends.
  int pp_prev_rank() const { return pp_prev_rank_; }
  int pp_next_rank() const { return pp_next_rank_; }
  // The same neighbours as ranks in pp() (their stage numbers), -1 at the ends.
  int pp_prev_stage() const { return is_first_stage() ? -1 : coord_.pp - 1; }
  int pp_next_stage() const { return is_last_stage() ? -1 : coord_.pp + 1; }

 private:
  Communicator* named(std::string_view name) const;
  std::unique_ptr<CommClock> clock_;
  std::unique_ptr<Communicator> timed_world_;  // the world given, timed
  Communicator* world_;
  DeviceMesh mesh_;
  GridShape shape_;
  GridCoord coord_;
  // One per grid_groups() entry, in its order.
  std::vector<std::unique_ptr<Communicator>> groups_;
  Communicator *dp_ = nullptr, *tp_ = nullptr, *pp_ = nullptr, *model_parallel_ = nullptr,
               *embedding_ = nullptr, *cp_ = nullptr, *dp_cp_ = nullptr;
  int pp_prev_rank_ = -1, pp_next_rank_ = -1;
};

}  // namespace mixpar
