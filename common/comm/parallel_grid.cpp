#include "comm/parallel_grid.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "util/errors.h"

namespace mixpar {

namespace {

std::string describe(const GridShape& s) { return mesh_text(s.dims()); }

// The pure functions' precondition: degrees >= 1 and a world that fits an int (the mesh
// refuses the rest with std::invalid_argument).
DeviceMesh mesh_of(const GridShape& s) { return s.mesh(); }

GridCoord coord_in(const DeviceMesh& m, int rank) {
  return GridCoord{.rank = rank,
                   .dp = m.coord(rank, "dp"),
                   .tp = m.coord(rank, "tp"),
                   .pp = m.coord(rank, "pp"),
                   .cp = m.coord(rank, "cp")};
}

}  // namespace

GridShape GridShape::of(const DeviceMesh& m) {
  return GridShape{.dp = m.size("dp"), .tp = m.size("tp"), .pp = m.size("pp"), .cp = m.size("cp")};
}

void validate(const GridShape& shape, int world) { validate_degrees(shape.dims(), world); }

int grid_rank(const GridShape& shape, int dp, int tp, int pp, int cp) {
  const DeviceMesh m = mesh_of(shape);
  if (dp < 0 || dp >= shape.dp || tp < 0 || tp >= shape.tp || pp < 0 || pp >= shape.pp ||
      cp < 0 || cp >= shape.cp) {
    throw std::out_of_range("grid: coordinate (dp " + std::to_string(dp) + ", tp " +
                            std::to_string(tp) + ", pp " + std::to_string(pp) +
                            (shape.cp != 1 || cp != 0 ? ", cp " + std::to_string(cp) : "") +
                            ") is outside " + describe(shape));
  }
  return m.rank_of({pp, dp, cp, tp});
}

GridCoord grid_coord(const GridShape& shape, int rank) { return coord_in(mesh_of(shape), rank); }

std::vector<int> tp_group(const GridShape& shape, int r) { return mesh_of(shape).group(r, {"tp"}); }
std::vector<int> dp_group(const GridShape& shape, int r) { return mesh_of(shape).group(r, {"dp"}); }
std::vector<int> pp_group(const GridShape& shape, int r) { return mesh_of(shape).group(r, {"pp"}); }
std::vector<int> cp_group(const GridShape& shape, int r) { return mesh_of(shape).group(r, {"cp"}); }
std::vector<int> dp_cp_group(const GridShape& shape, int r) {
  return mesh_of(shape).group(r, {"dp", "cp"});
}
std::vector<int> model_parallel_group(const GridShape& shape, int r) {
  return mesh_of(shape).group(r, {"pp", "tp"});
}

namespace {

std::vector<int> embedding_group_of(const DeviceMesh& m, int r) {
  const int stage = m.coord(r, "pp"), last = m.size("pp") - 1;
  if (last == 0) return {r};
  if (stage != 0 && stage != last) return {};
  return {m.with_coord(r, "pp", 0), m.with_coord(r, "pp", last)};
}

int pp_neighbour(const DeviceMesh& m, int r, int step) {
  const int stage = m.coord(r, "pp") + step;
  return stage < 0 || stage >= m.size("pp") ? -1 : m.with_coord(r, "pp", stage);
}

}  // namespace

std::vector<int> embedding_group(const GridShape& shape, int r) {
  return embedding_group_of(mesh_of(shape), r);
}

bool is_first_stage(const GridShape& shape, int r) { return grid_coord(shape, r).pp == 0; }

bool is_last_stage(const GridShape& shape, int r) {
  return grid_coord(shape, r).pp == shape.pp - 1;
}

int pp_prev(const GridShape& shape, int r) { return pp_neighbour(mesh_of(shape), r, -1); }
int pp_next(const GridShape& shape, int r) { return pp_neighbour(mesh_of(shape), r, +1); }

const std::vector<GridGroup>& grid_groups() {
  static const std::vector<GridGroup> groups = {
      {.name = "dp", .dims = {"dp"}},
      {.name = "tp", .dims = {"tp"}},
      {.name = "pp", .dims = {"pp"}},
      {.name = "model_parallel", .dims = {"pp", "tp"}},
      {.name = "embedding", .dims = {"pp"}, .ends_of_pipeline = true},
      {.name = "cp", .dims = {"cp"}, .needs = "cp"},
      {.name = "dp_cp", .dims = {"dp", "cp"}, .needs = "cp"},
  };
  return groups;
}

namespace {

// The communicator split() gave this rank must be the pure layout's group, in its order.
void check_group(const std::string& name, const Communicator* comm, const std::vector<int>& want,
                 int rank) {
  std::size_t index = 0;
  while (index < want.size() && want[index] != rank) ++index;
  if (want.empty() || index == want.size()) {
    if (comm != nullptr) {
      throw std::logic_error("grid: rank " + std::to_string(rank) + " belongs to no " + name +
                             " group but split() gave it one");
    }
    return;
  }
  if (comm == nullptr || comm->size() != static_cast<int>(want.size()) ||
      comm->rank() != static_cast<int>(index)) {
    throw std::logic_error(
        "grid: the " + name + " communicator of rank " + std::to_string(rank) + " is " +
        (comm == nullptr ? std::string("missing")
                         : "rank " + std::to_string(comm->rank()) + " of " +
                               std::to_string(comm->size())) +
        ", the layout says rank " + std::to_string(index) + " of " +
        std::to_string(want.size()));
  }
}

// The check's name of a group ("model-parallel", "dp-cp": the words of the error texts).
std::string spoken(const char* name) {
  std::string s = name;
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// The dimensions of `dims` whose size is > 1, in the mesh's order: what a group spans.
std::vector<std::string> spanned(const DeviceMesh& m, const std::vector<std::string>& dims) {
  std::vector<std::string> out;
  for (const MeshDim& d : m.dims()) {
    if (d.size > 1 && std::find(dims.begin(), dims.end(), d.name) != dims.end()) {
      out.push_back(d.name);
    }
  }
  return out;
}

DeviceMesh validated(const GridShape& shape, int world) {
  validate(shape, world);
  return shape.mesh();
}

}  // namespace

ParallelGrid::ParallelGrid(Communicator& world, GridShape shape)
    : ParallelGrid(world, validated(shape, world.size())) {}

ParallelGrid::ParallelGrid(Communicator& world, DeviceMesh mesh)
    : clock_(std::make_unique<CommClock>()),
      timed_world_(std::make_unique<TimedCommunicator>(world, *clock_, "world")),
      world_(timed_world_.get()),
      mesh_(std::move(mesh)),
      shape_(GridShape::of(mesh_)) {
  validate(mesh_, world.size());
  const int r = world.rank();
  coord_ = coord_in(mesh_, r);
  // Colours number the groups (the mixed-radix number of the coordinates a group does not
  // span); the key (the parent rank) keeps every group in ascending world-rank order. Every
  // rank makes the same calls in the same order.
  const bool holds_embedding = is_first_stage() || is_last_stage();
  for (const GridGroup& g : grid_groups()) {
    if (*g.needs != '\0' && mesh_.size(g.needs) == 1) {
      groups_.emplace_back();
      continue;
    }
    const bool member = !g.ends_of_pipeline || holds_embedding;
    // Every group timed into the grid's clock (timed_communicator.h): the bytes and bits
    // are the backend's, the seconds per group what the trainer's log reads.
    std::unique_ptr<Communicator> c = world.split(member ? mesh_.group_index(r, g.dims) : -1, r);
    if (c) c = std::make_unique<TimedCommunicator>(std::move(c), *clock_, g.name);
    groups_.push_back(std::move(c));
    check_group(spoken(g.name), groups_.back().get(),
                g.ends_of_pipeline ? embedding_group_of(mesh_, r) : mesh_.group(r, g.dims), r);
  }
  dp_ = named("dp");
  tp_ = named("tp");
  pp_ = named("pp");
  model_parallel_ = named("model_parallel");
  embedding_ = named("embedding");
  cp_ = named("cp");
  dp_cp_ = named("dp_cp");
  pp_prev_rank_ = pp_neighbour(mesh_, r, -1);
  pp_next_rank_ = pp_neighbour(mesh_, r, +1);
}

Communicator* ParallelGrid::named(std::string_view name) const {
  const std::vector<GridGroup>& table = grid_groups();
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (name == table[i].name) return groups_[i].get();
  }
  return nullptr;
}

Communicator& ParallelGrid::group(const std::vector<std::string>& dims) const {
  const std::vector<std::string> want = spanned(mesh_, dims);
  const std::vector<GridGroup>& table = grid_groups();
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (groups_[i] && !table[i].ends_of_pipeline && spanned(mesh_, table[i].dims) == want) {
      return *groups_[i];
    }
  }
  std::string names;
  for (const std::string& d : dims) names += (names.empty() ? "" : ", ") + d;
  throw std::logic_error("grid: no communicator spans {" + names + "} on " + mesh_.str());
}

std::vector<std::pair<std::string, Communicator*>> ParallelGrid::groups() const {
  std::vector<std::pair<std::string, Communicator*>> out;
  const std::vector<GridGroup>& table = grid_groups();
  for (std::size_t i = 0; i < table.size(); ++i) out.emplace_back(table[i].name, groups_[i].get());
  return out;
}

}  // namespace mixpar
