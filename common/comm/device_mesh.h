// DeviceMesh: the ranks of a world as a grid of named dimensions, the one description from
// which every coordinate, group and layout text of a parallel run is derived (torchtitan's
// ParallelDims and PyTorch's DeviceMesh are the same idea; docs/REFERENCE.md).
//
// A mesh is an ordered list of dimensions, outermost first. A rank is the mixed-radix number
// of its coordinates, the innermost dimension varying fastest:
//
//     rank = ((c_0 x n_1 + c_1) x n_2 + c_2) x ... ,   c_i in [0, n_i)
//
// The standard mesh is Megatron-LM's tp-cp-dp-pp order, [pp, dp, cp, tp]: tp innermost so
// that a tp group is a run of consecutive ranks (one node's NVLink island), the pipeline stage
// outermost. This is the formula of parallel_grid.h, ((pp x dp + dp) x cp + cp) x tp + tp.
//
// The group of a rank over a set of dimensions is the ranks that share its coordinates on
// every other dimension: {"tp"} is its tensor-parallel group, {"dp", "cp"} the group its
// replicated gradients are summed over, {"pp", "tp"} its model-parallel group. Listed in
// ascending rank order (the varying coordinates counted outermost first), which is the order
// of the ranks of the communicator split from it. A name the mesh lacks is a dimension of
// size 1: it adds nothing to a group and its coordinate is 0, so code that names a dimension
// runs unchanged on a mesh without it.
//
// A new dimension (expert parallelism, ...) is one more MeshDim: sizes of 1 change no rank
// (a factor 1 in the formula), which tests/common/device_mesh_test.cpp checks.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace mixpar {

struct MeshDim {
  std::string name;
  int size = 1;
  // Named in a layout's text even at size 1 ("dp 2 x tp 1 x pp 1"): the three dimensions of
  // the 3D grid are; a later one (cp, ...) is named only when > 1, so the 3D texts stay.
  bool named_at_one = true;
  bool operator==(const MeshDim&) const = default;
};

// Megatron's [pp, dp, cp, tp], outermost first, any degrees (a bad one too, for mesh_text to
// name it): the one place that orders the four standard dimensions.
std::vector<MeshDim> standard_dims(int dp, int tp, int cp, int pp);

class DeviceMesh {
 public:
  // std::invalid_argument for an empty or repeated name, a size < 1, or more ranks than an
  // int holds (a user's layout is refused before, by validate()).
  explicit DeviceMesh(std::vector<MeshDim> dims);
  // Megatron's [pp, dp, cp, tp] (cp named only when > 1).
  static DeviceMesh standard(int dp, int tp, int cp, int pp);

  // A copy with `dim` placed directly inside (after) the dimension `outer` (an
  // std::invalid_argument when the mesh has no `outer`).
  DeviceMesh with_dim(MeshDim dim, std::string_view outer) const;

  const std::vector<MeshDim>& dims() const { return dims_; }
  bool has(std::string_view name) const { return index_of(name) >= 0; }
  // The degree of `name`; 1 when the mesh has no such dimension.
  int size(std::string_view name) const;
  // The product of the sizes of `names` (1 for none).
  int size(std::initializer_list<std::string_view> names) const;
  int world() const { return world_; }

  // "dp 2 x tp 2 x cp 2 x pp 1": the data-parallel degree first, as the flags read, then the
  // other dimensions from the innermost out; a dimension not named_at_one only when > 1.
  std::string str() const;
  // The dimensions str() names, in its order (what a table of coordinates shows).
  std::vector<MeshDim> shown() const;

  // Coordinates in the order of dims(). std::out_of_range outside the mesh.
  int rank_of(const std::vector<int>& coords) const;
  std::vector<int> coords_of(int rank) const;
  // One coordinate of `rank` (0 for a name the mesh lacks).
  int coord(int rank, std::string_view name) const;
  // `rank` with the coordinate of `name` set to `value` (std::out_of_range outside).
  int with_coord(int rank, std::string_view name, int value) const;

  // The ranks sharing r's coordinates outside `names`, ascending (see above).
  std::vector<int> group(int r, const std::vector<std::string>& names) const;
  // Which group over `names` r is in: the mixed-radix number of its coordinates outside
  // `names` (the colour a communicator split takes; equal for exactly one group's ranks).
  int group_index(int r, const std::vector<std::string>& names) const;

 private:
  int index_of(std::string_view name) const;
  std::vector<MeshDim> dims_;
  int world_ = 1;
};

// The text of str() for any list of dimensions (also one with a bad degree, to name it),
// each name after `prefix` ("--" gives the flags: "--dp 2 x --tp 1 x --pp 1").
std::string mesh_text(const std::vector<MeshDim>& dims, std::string_view prefix = "");
// The dimensions mesh_text names, in its order (any degrees, no product formed).
std::vector<MeshDim> shown_dims(const std::vector<MeshDim>& dims);

// InputError, one line naming the numbers, unless the mesh's ranks are the world's:
// "grid: dp 2 x tp 2 x pp 3 = 12 ranks, but the world has 8". (Degrees < 1 are refused by
// validate_degrees, before a DeviceMesh can exist.)
void validate(const DeviceMesh& mesh, int world);
// InputError "grid: dp 0 x tp 2 x pp 2: every degree must be >= 1" for a degree < 1, and the
// product check above computed in 64 bits (a product over an int is still refused by number).
void validate_degrees(const std::vector<MeshDim>& dims, int world);

}  // namespace mixpar
