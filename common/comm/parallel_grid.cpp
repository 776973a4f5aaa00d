#include "comm/parallel_grid.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "util/errors.h"

namespace mixpar {

namespace {

std::string describe(const GridShape& s) {
  return "dp " + std::to_string(s.dp) + " x tp " + std::to_string(s.tp) +
         (s.cp != 1 ? " x cp " + std::to_string(s.cp) : std::string()) + " x pp " +
         std::to_string(s.pp);
}

// The pure functions' precondition: degrees >= 1 and a world that fits an int.
void require_degrees(const GridShape& s) {
  if (s.dp < 1 || s.tp < 1 || s.pp < 1 || s.cp < 1) {
    throw std::invalid_argument("grid: " + describe(s) + ": every degree must be >= 1");
  }
  if (std::int64_t{s.dp} * s.tp * s.pp * s.cp > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("grid: " + describe(s) + " has more ranks than an int holds");
  }
}

// A group of `count` ranks, the i-th being at(i) (called with i = 0, 1, ...).
template <class At>
std::vector<int> members(int count, At&& at) {
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(at(i));
  return out;
}

}  // namespace

void validate(const GridShape& shape, int world) {
  if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1 || shape.cp < 1) {
    throw InputError("grid: " + describe(shape) + ": every degree must be >= 1");
  }
  const std::int64_t product = std::int64_t{shape.dp} * std::int64_t{shape.tp} *
                               std::int64_t{shape.pp} * std::int64_t{shape.cp};
  if (product != world) {
    throw InputError("grid: " + describe(shape) + " = " + std::to_string(product) +
                     " ranks, but the world has " + std::to_string(world));
  }
}

int grid_rank(const GridShape& shape, int dp, int tp, int pp, int cp) {
  require_degrees(shape);
  if (dp < 0 || dp >= shape.dp || tp < 0 || tp >= shape.tp || pp < 0 || pp >= shape.pp ||
      cp < 0 || cp >= shape.cp) {
    throw std::out_of_range("grid: coordinate (dp " + std::to_string(dp) + ", tp " +
                            std::to_string(tp) + ", pp " + std::to_string(pp) +
                            (shape.cp != 1 || cp != 0 ? ", cp " + std::to_string(cp) : "") +
                            ") is outside " + describe(shape));
  }
  return ((pp * shape.dp + dp) * shape.cp + cp) * shape.tp + tp;
}

GridCoord grid_coord(const GridShape& shape, int rank) {
  require_degrees(shape);
  if (rank < 0 || rank >= shape.world()) {
    throw std::out_of_range("grid: rank " + std::to_string(rank) + " is outside " +
                            describe(shape) + " = " + std::to_string(shape.world()) + " ranks");
  }
  return GridCoord{.rank = rank,
                   .dp = (rank / (shape.tp * shape.cp)) % shape.dp,
                   .tp = rank % shape.tp,
                   .pp = rank / (shape.tp * shape.cp * shape.dp),
                   .cp = (rank / shape.tp) % shape.cp};
}

std::vector<int> tp_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  return members(shape.tp, [&](int t) { return grid_rank(shape, c.dp, t, c.pp, c.cp); });
}

std::vector<int> dp_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  return members(shape.dp, [&](int d) { return grid_rank(shape, d, c.tp, c.pp, c.cp); });
}

std::vector<int> pp_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  return members(shape.pp, [&](int p) { return grid_rank(shape, c.dp, c.tp, p, c.cp); });
}

std::vector<int> cp_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  return members(shape.cp, [&](int k) { return grid_rank(shape, c.dp, c.tp, c.pp, k); });
}

std::vector<int> dp_cp_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  // dp outer, cp inner: the ascending order of the ranks.
  return members(shape.dp * shape.cp, [&](int i) {
    return grid_rank(shape, i / shape.cp, c.tp, c.pp, i % shape.cp);
  });
}

std::vector<int> model_parallel_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  // Stage outer, tp inner: the ascending order of the ranks.
  return members(shape.tp * shape.pp, [&](int i) {
    return grid_rank(shape, c.dp, i % shape.tp, i / shape.tp, c.cp);
  });
}

std::vector<int> embedding_group(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  if (shape.pp == 1) return {r};
  if (c.pp != 0 && c.pp != shape.pp - 1) return {};
  return {grid_rank(shape, c.dp, c.tp, 0, c.cp), grid_rank(shape, c.dp, c.tp, shape.pp - 1, c.cp)};
}

bool is_first_stage(const GridShape& shape, int r) { return grid_coord(shape, r).pp == 0; }

bool is_last_stage(const GridShape& shape, int r) {
  return grid_coord(shape, r).pp == shape.pp - 1;
}

int pp_prev(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  return c.pp == 0 ? -1 : grid_rank(shape, c.dp, c.tp, c.pp - 1, c.cp);
}

int pp_next(const GridShape& shape, int r) {
  const GridCoord c = grid_coord(shape, r);
  return c.pp == shape.pp - 1 ? -1 : grid_rank(shape, c.dp, c.tp, c.pp + 1, c.cp);
}

namespace {

// The communicator split() gave this rank must be the pure layout's group, in its order.
void check_group(const char* name, const Communicator* comm, const std::vector<int>& want,
                 int rank) {
  std::size_t index = 0;
  while (index < want.size() && want[index] != rank) ++index;
  if (want.empty() || index == want.size()) {
    if (comm != nullptr) {
      throw std::logic_error(std::string("grid: rank ") + std::to_string(rank) +
                             " belongs to no " + name + " group but split() gave it one");
    }
    return;
  }
  if (comm == nullptr || comm->size() != static_cast<int>(want.size()) ||
      comm->rank() != static_cast<int>(index)) {
    throw std::logic_error(
        std::string("grid: the ") + name + " communicator of rank " + std::to_string(rank) +
        " is " +
        (comm == nullptr ? std::string("missing")
                         : "rank " + std::to_string(comm->rank()) + " of " +
                               std::to_string(comm->size())) +
        ", the layout says rank " + std::to_string(index) + " of " +
        std::to_string(want.size()));
  }
}

}  // namespace

ParallelGrid::ParallelGrid(Communicator& world, GridShape shape) : world_(&world), shape_(shape) {
  validate(shape_, world.size());
  const int r = world.rank();
  coord_ = grid_coord(shape_, r);
  const GridCoord& c = coord_;
  // Colours number the groups; the key (the parent rank) keeps every group in ascending
  // world-rank order. Every rank makes the same five calls in the same order.
  // With cp == 1 every c.cp is 0 and shape_.cp is 1: the colours of the 3D grid.
  const int cps = shape_.cp;
  dp_ = world.split((c.pp * cps + c.cp) * shape_.tp + c.tp, r);
  tp_ = world.split((c.pp * shape_.dp + c.dp) * cps + c.cp, r);
  pp_ = world.split((c.dp * cps + c.cp) * shape_.tp + c.tp, r);
  model_parallel_ = world.split(c.dp * cps + c.cp, r);
  const bool holds_embedding = is_first_stage() || is_last_stage();
  embedding_ = world.split(holds_embedding ? (c.dp * cps + c.cp) * shape_.tp + c.tp : -1, r);
  if (cps > 1) {
    cp_ = world.split((c.pp * shape_.dp + c.dp) * shape_.tp + c.tp, r);
    dp_cp_ = world.split(c.pp * shape_.tp + c.tp, r);
    check_group("cp", cp_.get(), cp_group(shape_, r), r);
    check_group("dp-cp", dp_cp_.get(), dp_cp_group(shape_, r), r);
  }

  check_group("dp", dp_.get(), dp_group(shape_, r), r);
  check_group("tp", tp_.get(), tp_group(shape_, r), r);
  check_group("pp", pp_.get(), pp_group(shape_, r), r);
  check_group("model-parallel", model_parallel_.get(), model_parallel_group(shape_, r), r);
  check_group("embedding", embedding_.get(), embedding_group(shape_, r), r);

  pp_prev_rank_ = pp_prev(shape_, r);
  pp_next_rank_ = pp_next(shape_, r);
}

}  // namespace mixpar
