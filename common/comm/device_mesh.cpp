#include "comm/device_mesh.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include "util/errors.h"

namespace mixpar {

namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::int64_t product(const std::vector<MeshDim>& dims) {
  std::int64_t n = 1;
  for (const MeshDim& d : dims) n *= d.size;
  return n;
}

}  // namespace

namespace {

// The data-parallel degree first, then innermost to outermost ("dp 2 x tp 2 x cp 2 x pp 1"),
// a dimension not named_at_one only when > 1.
std::vector<MeshDim> text_order(const std::vector<MeshDim>& dims) {
  std::vector<MeshDim> order;
  for (const MeshDim& d : dims) {
    if (d.name == "dp") order.push_back(d);
  }
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (it->name != "dp") order.push_back(*it);
  }
  std::erase_if(order, [](const MeshDim& d) { return !d.named_at_one && d.size == 1; });
  return order;
}

}  // namespace

std::vector<MeshDim> shown_dims(const std::vector<MeshDim>& dims) { return text_order(dims); }

std::string mesh_text(const std::vector<MeshDim>& dims, std::string_view prefix) {
  std::string out;
  for (const MeshDim& d : text_order(dims)) {
    if (!out.empty()) out += " x ";
    out += std::string(prefix) + d.name + " " + std::to_string(d.size);
  }
  return out;
}

std::vector<MeshDim> DeviceMesh::shown() const { return text_order(dims_); }

DeviceMesh::DeviceMesh(std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  std::vector<std::string> seen;
  for (const MeshDim& d : dims_) {
    if (d.name.empty() || contains(seen, d.name)) {
      throw std::invalid_argument("mesh: dimension name '" + d.name + "' is empty or repeated");
    }
    seen.push_back(d.name);
    if (d.size < 1) {
      throw std::invalid_argument("grid: " + mesh_text(dims_) + ": every degree must be >= 1");
    }
  }
  const std::int64_t n = product(dims_);
  if (n > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("grid: " + mesh_text(dims_) + " has more ranks than an int holds");
  }
  world_ = static_cast<int>(n);
}

std::vector<MeshDim> standard_dims(int dp, int tp, int cp, int pp) {
  // tp innermost (a tp group is consecutive ranks), then cp, dp, and the pipeline stage
  // outermost; cp, the fourth, is named in texts only when > 1.
  return {{"pp", pp, true}, {"dp", dp, true}, {"cp", cp, false}, {"tp", tp, true}};
}

DeviceMesh DeviceMesh::standard(int dp, int tp, int cp, int pp) {
  return DeviceMesh(standard_dims(dp, tp, cp, pp));
}

DeviceMesh DeviceMesh::with_dim(MeshDim dim, std::string_view outer) const {
  const int at = index_of(outer);
  if (at < 0) throw std::invalid_argument("mesh: no dimension '" + std::string(outer) + "'");
  std::vector<MeshDim> dims = dims_;
  dims.insert(dims.begin() + at + 1, std::move(dim));
  return DeviceMesh(std::move(dims));
}

int DeviceMesh::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int DeviceMesh::size(std::string_view name) const {
  const int i = index_of(name);
  return i < 0 ? 1 : dims_[static_cast<std::size_t>(i)].size;
}

int DeviceMesh::size(std::initializer_list<std::string_view> names) const {
  int n = 1;
  for (std::string_view name : names) n *= size(name);
  return n;
}

std::string DeviceMesh::str() const { return mesh_text(dims_); }

int DeviceMesh::rank_of(const std::vector<int>& coords) const {
  if (coords.size() != dims_.size()) {
    throw std::out_of_range("grid: " + std::to_string(coords.size()) + " coordinates for " +
                            std::to_string(dims_.size()) + " dimensions");
  }
  int rank = 0;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= dims_[i].size) {
      throw std::out_of_range("grid: coordinate " + dims_[i].name + " " +
                              std::to_string(coords[i]) + " is outside " + str());
    }
    rank = rank * dims_[i].size + coords[i];
  }
  return rank;
}

std::vector<int> DeviceMesh::coords_of(int rank) const {
  if (rank < 0 || rank >= world_) {
    throw std::out_of_range("grid: rank " + std::to_string(rank) + " is outside " + str() +
                            " = " + std::to_string(world_) + " ranks");
  }
  std::vector<int> out(dims_.size());
  for (std::size_t i = dims_.size(); i-- > 0;) {
    out[i] = rank % dims_[i].size;
    rank /= dims_[i].size;
  }
  return out;
}

int DeviceMesh::coord(int rank, std::string_view name) const {
  const std::vector<int> c = coords_of(rank);
  const int i = index_of(name);
  return i < 0 ? 0 : c[static_cast<std::size_t>(i)];
}

int DeviceMesh::with_coord(int rank, std::string_view name, int value) const {
  std::vector<int> c = coords_of(rank);
  const int i = index_of(name);
  if (i < 0) {
    if (value != 0) throw std::out_of_range("grid: no dimension " + std::string(name));
    return rank;
  }
  c[static_cast<std::size_t>(i)] = value;
  return rank_of(c);
}

std::vector<int> DeviceMesh::group(int r, const std::vector<std::string>& names) const {
  const std::vector<int> at = coords_of(r);
  // Count the coordinates of `names` from zero, the innermost fastest: ascending ranks.
  std::vector<std::size_t> varying;
  int count = 1;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (contains(names, dims_[i].name)) {
      varying.push_back(i);
      count *= dims_[i].size;
    }
  }
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int k = 0; k < count; ++k) {
    std::vector<int> c = at;
    int rest = k;
    for (std::size_t j = varying.size(); j-- > 0;) {
      const std::size_t i = varying[j];
      c[i] = rest % dims_[i].size;
      rest /= dims_[i].size;
    }
    out.push_back(rank_of(c));
  }
  return out;
}

int DeviceMesh::group_index(int r, const std::vector<std::string>& names) const {
  const std::vector<int> at = coords_of(r);
  int index = 0;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (!contains(names, dims_[i].name)) index = index * dims_[i].size + at[i];
  }
  return index;
}

void validate_degrees(const std::vector<MeshDim>& dims, int world) {
  for (const MeshDim& d : dims) {
    if (d.size < 1) throw InputError("grid: " + mesh_text(dims) + ": every degree must be >= 1");
  }
  const std::int64_t n = product(dims);
  if (n != world) {
    throw InputError("grid: " + mesh_text(dims) + " = " + std::to_string(n) +
                     " ranks, but the world has " + std::to_string(world));
  }
}

void validate(const DeviceMesh& mesh, int world) { validate_degrees(mesh.dims(), world); }

}  // namespace mixpar
