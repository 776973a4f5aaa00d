// ParallelGrid: the dp x tp x pp layout is Megatron's (tp fastest, then dp, pp outermost),
// coordinates and ranks are inverse for every shape up to 16 ranks, every kind of group
// partitions the world, a shape that does not fill the world is a one-line InputError, the
// communicators split() gives each rank are exactly the pure layout's groups (checked with
// one collective per group and point-to-point along the pipeline), and build/bin/mixpar-grid
// prints the same layout.
#include "comm/parallel_grid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm_local_test_util.h"
#include "command.h"
#include "expect.h"
#include "temp_dir.h"
#include "util/errors.h"
#include "util/json.h"

#ifndef MIXPAR_GRID_PATH
#error "MIXPAR_GRID_PATH must name the mixpar-grid binary"
#endif

namespace mixpar {
namespace {

using Group = std::vector<int>;
using GroupOf = std::function<Group(const GridShape&, int)>;

struct NamedGroup {
  const char* name;
  GroupOf of;
};
const NamedGroup kGroups[] = {{"tp", tp_group},
                              {"dp", dp_group},
                              {"pp", pp_group},
                              {"model-parallel", model_parallel_group},
                              {"embedding", embedding_group}};

std::string str(const GridShape& s) {
  return "dp " + std::to_string(s.dp) + " x tp " + std::to_string(s.tp) + " x pp " +
         std::to_string(s.pp);
}

// Every (dp, tp, pp) with dp x tp x pp <= max_world.
std::vector<GridShape> shapes_up_to(int max_world) {
  std::vector<GridShape> out;
  for (int dp = 1; dp <= max_world; ++dp) {
    for (int tp = 1; dp * tp <= max_world; ++tp) {
      for (int pp = 1; dp * tp * pp <= max_world; ++pp) out.push_back({dp, tp, pp});
    }
  }
  return out;
}

TEST(ParallelGrid, RankFormulaIsTpFastestThenDpThenPp) {
  const GridShape s{.dp = 3, .tp = 2, .pp = 4};  // 24 ranks, all degrees different
  EXPECT_EQ(s.world(), 24);
  EXPECT_EQ(grid_rank(s, 0, 0, 0), 0);
  EXPECT_EQ(grid_rank(s, 0, 1, 0), 1);   // tp + 1: the next rank
  EXPECT_EQ(grid_rank(s, 1, 0, 0), 2);   // dp + 1: tp_size ranks on
  EXPECT_EQ(grid_rank(s, 0, 0, 1), 6);   // pp + 1: tp_size x dp_size ranks on
  EXPECT_EQ(grid_rank(s, 2, 1, 3), 23);  // the last rank
  for (int p = 0; p < s.pp; ++p) {
    for (int d = 0; d < s.dp; ++d) {
      for (int t = 0; t < s.tp; ++t) {
        EXPECT_EQ(grid_rank(s, d, t, p), (p * s.dp + d) * s.tp + t) << d << " " << t << " " << p;
      }
    }
  }
  // Enumerating pp outermost, tp innermost walks the ranks in order.
  int expected = 0;
  for (int p = 0; p < s.pp; ++p) {
    for (int d = 0; d < s.dp; ++d) {
      for (int t = 0; t < s.tp; ++t) EXPECT_EQ(grid_rank(s, d, t, p), expected++);
    }
  }
  EXPECT_THROW(grid_rank(s, 3, 0, 0), std::out_of_range);
  EXPECT_THROW(grid_rank(s, 0, -1, 0), std::out_of_range);
  EXPECT_THROW(grid_coord(s, 24), std::out_of_range);
  EXPECT_THROW(grid_coord(GridShape{.dp = 0}, 0), std::invalid_argument);
}

TEST(ParallelGrid, CoordinatesRoundTripForEveryRankOfManyShapes) {
  const std::vector<GridShape> shapes = shapes_up_to(16);
  EXPECT_EQ(shapes.size(), 110u);  // the ordered factorizations into 3 of n = 1..16
  for (const GridShape& s : shapes) {
    std::set<std::vector<int>> seen;
    for (int r = 0; r < s.world(); ++r) {
      const GridCoord c = grid_coord(s, r);
      EXPECT_EQ(c.rank, r);
      ASSERT_TRUE(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 &&
                  c.pp < s.pp)
          << str(s) << " rank " << r;
      EXPECT_EQ(grid_rank(s, c.dp, c.tp, c.pp), r) << str(s);
      seen.insert({c.dp, c.tp, c.pp});
    }
    EXPECT_EQ(static_cast<int>(seen.size()), s.world()) << str(s) << ": coordinates repeat";
  }
}

TEST(ParallelGrid, TwoByTwoByTwoGroupsHaveTheExpectedMembers) {
  const GridShape s{.dp = 2, .tp = 2, .pp = 2};
  const std::vector<GridCoord> coords = {{0, 0, 0, 0}, {1, 0, 1, 0}, {2, 1, 0, 0}, {3, 1, 1, 0},
                                         {4, 0, 0, 1}, {5, 0, 1, 1}, {6, 1, 0, 1}, {7, 1, 1, 1}};
  const std::vector<Group> tp = {{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}, {4, 5}, {6, 7}, {6, 7}};
  const std::vector<Group> dp = {{0, 2}, {1, 3}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {4, 6}, {5, 7}};
  const std::vector<Group> pp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};
  const std::vector<Group> mp = {{0, 1, 4, 5}, {0, 1, 4, 5}, {2, 3, 6, 7}, {2, 3, 6, 7},
                                 {0, 1, 4, 5}, {0, 1, 4, 5}, {2, 3, 6, 7}, {2, 3, 6, 7}};
  const std::vector<int> prev = {-1, -1, -1, -1, 0, 1, 2, 3};
  const std::vector<int> next = {4, 5, 6, 7, -1, -1, -1, -1};
  for (int r = 0; r < 8; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const GridCoord c = grid_coord(s, r);
    EXPECT_EQ(c.rank, coords[i].rank);
    EXPECT_EQ(c.dp, coords[i].dp) << "rank " << r;
    EXPECT_EQ(c.tp, coords[i].tp) << "rank " << r;
    EXPECT_EQ(c.pp, coords[i].pp) << "rank " << r;
    EXPECT_EQ(tp_group(s, r), tp[i]) << "rank " << r;
    EXPECT_EQ(dp_group(s, r), dp[i]) << "rank " << r;
    EXPECT_EQ(pp_group(s, r), pp[i]) << "rank " << r;
    EXPECT_EQ(model_parallel_group(s, r), mp[i]) << "rank " << r;
    EXPECT_EQ(embedding_group(s, r), pp[i]) << "rank " << r;  // pp 2: both stages are ends
    EXPECT_EQ(pp_prev(s, r), prev[i]) << "rank " << r;
    EXPECT_EQ(pp_next(s, r), next[i]) << "rank " << r;
    EXPECT_EQ(is_first_stage(s, r), r < 4);
    EXPECT_EQ(is_last_stage(s, r), r >= 4);
  }
}

TEST(ParallelGrid, EmbeddingGroupIsFirstAndLastStageAndEmptyInTheMiddle) {
  const GridShape deep{.dp = 1, .tp = 2, .pp = 4};  // stages {0,1} {2,3} {4,5} {6,7}
  EXPECT_EQ(embedding_group(deep, 0), (Group{0, 6}));
  EXPECT_EQ(embedding_group(deep, 7), (Group{1, 7}));
  for (int r = 2; r < 6; ++r) EXPECT_TRUE(embedding_group(deep, r).empty()) << "rank " << r;
  const GridShape flat{.dp = 2, .tp = 2, .pp = 1};  // every rank is first and last stage
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(embedding_group(flat, r), (Group{r}));
    EXPECT_TRUE(is_first_stage(flat, r) && is_last_stage(flat, r));
    EXPECT_EQ(pp_prev(flat, r), -1);
    EXPECT_EQ(pp_next(flat, r), -1);
  }
}

// For every shape and every kind of group: the group of r holds r, is ascending, has the
// size its degrees say, is the group of each of its members (so the groups are disjoint),
// and the groups cover the world (the embedding groups: exactly the first and last stages).
TEST(ParallelGrid, EveryGroupPartitionsTheWorld) {
  for (const GridShape& s : shapes_up_to(16)) {
    const int sizes[] = {s.tp, s.dp, s.pp, s.tp * s.pp, s.pp == 1 ? 1 : 2};
    for (std::size_t k = 0; k < std::size(kGroups); ++k) {
      const NamedGroup& g = kGroups[k];
      std::vector<int> covered(static_cast<std::size_t>(s.world()), 0);
      for (int r = 0; r < s.world(); ++r) {
        const Group members = g.of(s, r);
        const int stage = grid_coord(s, r).pp;
        if (k == 4 && stage != 0 && stage != s.pp - 1) {
          EXPECT_TRUE(members.empty()) << g.name << " " << str(s) << " rank " << r;
          continue;
        }
        ASSERT_EQ(static_cast<int>(members.size()), sizes[k]) << g.name << " " << str(s);
        EXPECT_TRUE(std::is_sorted(members.begin(), members.end())) << g.name << " " << str(s);
        EXPECT_NE(std::find(members.begin(), members.end(), r), members.end())
            << g.name << " " << str(s) << " rank " << r;
        for (int m : members) EXPECT_EQ(g.of(s, m), members) << g.name << " " << str(s);
        if (members.front() == r) {
          for (int m : members) ++covered[static_cast<std::size_t>(m)];
        }
      }
      for (int r = 0; r < s.world(); ++r) {
        const int stage = grid_coord(s, r).pp;
        const int want = k == 4 && stage != 0 && stage != s.pp - 1 ? 0 : 1;
        EXPECT_EQ(covered[static_cast<std::size_t>(r)], want)
            << g.name << " " << str(s) << " rank " << r;
      }
    }
  }
}

TEST(ParallelGrid, ProductMismatchIsOneLineInputError) {
  const auto message = [](const GridShape& s, int world) {
    return test_support::input_error_of([&] { validate(s, world); });
  };
  EXPECT_EQ(message({.dp = 2, .tp = 2, .pp = 3}, 8),
            "grid: dp 2 x tp 2 x pp 3 = 12 ranks, but the world has 8");
  EXPECT_EQ(message({.dp = 3}, 8), "grid: dp 3 x tp 1 x pp 1 = 3 ranks, but the world has 8");
  EXPECT_EQ(message({.dp = 0, .tp = 2, .pp = 2}, 0),
            "grid: dp 0 x tp 2 x pp 2: every degree must be >= 1");
  EXPECT_EQ(message({.dp = 1, .tp = -1, .pp = 1}, 1),
            "grid: dp 1 x tp -1 x pp 1: every degree must be >= 1");
  // dp x tp x pp overflowing an int is still compared exactly.
  EXPECT_EQ(message({.dp = 65536, .tp = 65536, .pp = 1}, 0),
            "grid: dp 65536 x tp 65536 x pp 1 = 4294967296 ranks, but the world has 0");
  EXPECT_NO_THROW(validate({.dp = 2, .tp = 2, .pp = 2}, 8));
  // The constructor validates against the communicator before any split.
  bool threw = false;
  run_local(4, [&](Communicator& c) {
    try {
      ParallelGrid grid(c, {.dp = 2, .tp = 1, .pp = 1});
    } catch (const InputError& e) {
      if (c.rank() == 0) {
        threw = true;
        EXPECT_EQ(std::string(e.what()), "grid: dp 2 x tp 1 x pp 1 = 2 ranks, but the world has 4");
      }
    }
    EXPECT_EQ(c.traffic().totals("split").calls, 0);
  });
  EXPECT_TRUE(threw);
}

// Each rank's communicators have the sizes and ranks of the pure groups, for every shape
// up to 8 ranks (the constructor also checks the ranks itself).
TEST(ParallelGrid, CommunicatorsMatchTheLayoutForEveryShapeUpTo8Ranks) {
  for (const GridShape& s : shapes_up_to(8)) {
    run_local(s.world(), [&](Communicator& world) {
      const ParallelGrid g(world, s);
      const int r = world.rank();
      EXPECT_EQ(g.coord().rank, r);
      // The world given, timed (comm/timed_communicator.h): its ranks and its traffic record.
      EXPECT_EQ(g.world().rank(), r);
      EXPECT_EQ(g.world().size(), world.size());
      EXPECT_EQ(&g.world().traffic(), &world.traffic());
      EXPECT_EQ(g.tp().size(), s.tp) << str(s);
      EXPECT_EQ(g.dp().size(), s.dp) << str(s);
      EXPECT_EQ(g.pp().size(), s.pp) << str(s);
      EXPECT_EQ(g.model_parallel().size(), s.tp * s.pp) << str(s);
      EXPECT_EQ(g.tp().rank(), g.coord().tp);
      EXPECT_EQ(g.dp().rank(), g.coord().dp);
      EXPECT_EQ(g.pp().rank(), g.coord().pp);
      EXPECT_EQ(g.is_first_stage(), is_first_stage(s, r));
      EXPECT_EQ(g.is_last_stage(), is_last_stage(s, r));
      EXPECT_EQ(g.embedding() != nullptr, g.is_first_stage() || g.is_last_stage()) << str(s);
      if (g.embedding() != nullptr) {
        EXPECT_EQ(g.embedding()->size(), static_cast<int>(embedding_group(s, r).size()));
      }
      EXPECT_EQ(g.pp_prev_rank(), pp_prev(s, r));
      EXPECT_EQ(g.pp_next_rank(), pp_next(s, r));
      EXPECT_EQ(g.pp_prev_stage(), g.pp_prev_rank() < 0 ? -1 : g.coord().pp - 1);
      EXPECT_EQ(g.pp_next_stage(), g.pp_next_rank() < 0 ? -1 : g.coord().pp + 1);
      EXPECT_EQ(world.traffic().totals("split").calls, 5);  // the same five on every rank
    });
  }
}

// A backend whose split() orders each group backwards (key = -key): the grid must notice.
class ReversingSplit final : public Communicator {
 public:
  explicit ReversingSplit(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return inner_.backend(); }
  void send(const Tensor& t, int dst, int tag) override { inner_.send(t, dst, tag); }
  void recv(Tensor& t, int src, int tag) override { inner_.recv(t, src, tag); }
  void sendrecv(const Tensor& s, int dst, Tensor& r, int src, int tag) override {
    inner_.sendrecv(s, dst, r, src, tag);
  }
  void barrier() override { inner_.barrier(); }
  void broadcast(Tensor& t, int root) override { inner_.broadcast(t, root); }
  void all_reduce(Tensor& t, ReduceOp op) override { inner_.all_reduce(t, op); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    inner_.reduce_scatter(in, out, op);
  }
  void all_gather(const Tensor& in, Tensor& out) override { inner_.all_gather(in, out); }
  void all_to_all(const Tensor& in, std::span<const std::int64_t> sc, Tensor& out,
                  std::span<const std::int64_t> rc) override {
    inner_.all_to_all(in, sc, out, rc);
  }
  bool all_reduce_or(bool flag) override { return inner_.all_reduce_or(flag); }
  void broadcast_bytes(std::span<std::byte> b, int root) override { inner_.broadcast_bytes(b, root); }
  void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override {
    inner_.all_gather_bytes(in, out);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return inner_.split(color, -key);
  }

 private:
  Communicator& inner_;
};

TEST(ParallelGrid, SplitThatBreaksTheLayoutIsALogicError) {
  std::vector<std::string> errors(4);
  run_local(4, [&](Communicator& world) {
    ReversingSplit reversed(world);
    try {
      ParallelGrid grid(reversed, {.dp = 2, .tp = 2, .pp = 1});
    } catch (const std::logic_error& e) {
      errors[static_cast<std::size_t>(world.rank())] = e.what();
    }
  });
  EXPECT_EQ(errors[0],
            "grid: the dp communicator of rank 0 is rank 1 of 2, the layout says rank 0 of 2");
  for (const std::string& e : errors) EXPECT_CONTAINS(e, "the dp communicator of rank");
}

double sum(const Group& g) { return std::accumulate(g.begin(), g.end(), 0.0); }

// A rank's world rank all-reduced over one of its communicators.
double all_reduced_rank(Communicator& c, int world_rank) {
  Tensor t = Tensor::from_floats(std::vector<float>{static_cast<float>(world_rank)}, {1});
  c.all_reduce(t);
  return t.item();
}

TEST(ParallelGrid, OneCollectivePerGroupGivesTheRightSums) {
  const GridShape shapes[] = {{.dp = 2, .tp = 2, .pp = 2}, {.dp = 1, .tp = 2, .pp = 4},
                             {.dp = 2, .tp = 1, .pp = 4}, {.dp = 4, .tp = 2, .pp = 1}};
  for (const GridShape& s : shapes) {
    run_local(8, [&](Communicator& world) {
      const ParallelGrid g(world, s);
      const int r = world.rank();
      EXPECT_EQ(all_reduced_rank(g.tp(), r), sum(tp_group(s, r))) << str(s) << " rank " << r;
      EXPECT_EQ(all_reduced_rank(g.dp(), r), sum(dp_group(s, r))) << str(s) << " rank " << r;
      EXPECT_EQ(all_reduced_rank(g.pp(), r), sum(pp_group(s, r))) << str(s) << " rank " << r;
      EXPECT_EQ(all_reduced_rank(g.model_parallel(), r), sum(model_parallel_group(s, r)))
          << str(s) << " rank " << r;
      if (Communicator* e = g.embedding()) {
        EXPECT_EQ(all_reduced_rank(*e, r), sum(embedding_group(s, r))) << str(s) << " rank " << r;
      }
      EXPECT_EQ(all_reduced_rank(world, r), 28.0);  // the world is untouched: 0 + ... + 7
    });
  }
}

// Stage i sends its world rank to stage i+1 over pp(), addressed by stage, and back to stage
// i-1 over the world, addressed by world rank: each rank hears from exactly its neighbours.
TEST(ParallelGrid, PipelineNeighboursExchangeByPointToPoint) {
  const GridShape shapes[] = {{.dp = 2, .tp = 2, .pp = 2}, {.dp = 1, .tp = 2, .pp = 4},
                             {.dp = 1, .tp = 1, .pp = 8}};
  for (const GridShape& s : shapes) {
    run_local(
        8,
        [&](Communicator& world) {
          const ParallelGrid g(world, s);
          const int r = world.rank();
          const Tensor mine = Tensor::from_floats(std::vector<float>{static_cast<float>(r)}, {1});
          Tensor got = Tensor::empty({1}, DType::kF32);
          // Forward: activations, along the pp communicator.
          if (g.pp_next_stage() >= 0) g.pp().send(mine, g.pp_next_stage(), 1);
          if (g.pp_prev_stage() >= 0) {
            g.pp().recv(got, g.pp_prev_stage(), 1);
            EXPECT_EQ(got.item(), static_cast<float>(g.pp_prev_rank())) << str(s) << " rank " << r;
          }
          // Backward: gradients, along the world by world rank.
          if (g.pp_prev_rank() >= 0) world.send(mine, g.pp_prev_rank(), 2);
          if (g.pp_next_rank() >= 0) {
            world.recv(got, g.pp_next_rank(), 2);
            EXPECT_EQ(got.item(), static_cast<float>(g.pp_next_rank())) << str(s) << " rank " << r;
          }
        },
        LocalOptions{.synchronous_sends = true});  // a schedule that needs no buffering
  }
}

// ---- build/bin/mixpar-grid

using test_support::CliRun;

CliRun mixpar_grid(const std::string& args) {
  const test_support::TempDir dir;
  return test_support::run_shell(dir, std::string("'") + MIXPAR_GRID_PATH + "' " + args);
}

TEST(ParallelGrid, MixparGridJsonNamesEveryRankAndGroupOnce) {
  const CliRun run = mixpar_grid("--world 8 --dp 2 --tp 2 --pp 2 --json");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const Json j = Json::parse(run.out, "mixpar-grid --json");
  EXPECT_EQ(j.at("shape"), Json::parse(R"({"world": 8, "dp": 2, "tp": 2, "pp": 2})"));
  const Json& ranks = j.at("ranks");
  ASSERT_EQ(ranks.size(), 8u);
  const GridShape s{.dp = 2, .tp = 2, .pp = 2};
  for (int r = 0; r < 8; ++r) {
    const Json& e = ranks.at(static_cast<std::size_t>(r));
    const GridCoord c = grid_coord(s, r);
    EXPECT_EQ(e.at("rank").as_int(), r);
    EXPECT_EQ(e.at("dp").as_int(), c.dp);
    EXPECT_EQ(e.at("tp").as_int(), c.tp);
    EXPECT_EQ(e.at("pp").as_int(), c.pp);
    EXPECT_EQ(e.at("prev").as_int(), pp_prev(s, r));
    EXPECT_EQ(e.at("next").as_int(), pp_next(s, r));
    EXPECT_EQ(e.at("first_stage").as_bool(), r < 4);
    EXPECT_EQ(e.at("last_stage").as_bool(), r >= 4);
  }
  EXPECT_EQ(ranks.at(0), Json::parse(R"({"rank": 0, "dp": 0, "tp": 0, "pp": 0, "prev": -1,
      "next": 4, "first_stage": true, "last_stage": false})"));
  EXPECT_EQ(j.at("groups"), Json::parse(R"({
      "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
      "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
      "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
      "model_parallel": [[0, 1, 4, 5], [2, 3, 6, 7]],
      "embedding": [[0, 4], [1, 5], [2, 6], [3, 7]]})"));
  // The world defaults to dp x tp x pp.
  const CliRun deflt = mixpar_grid("--dp 2 --tp 2 --pp 2 --json");
  ASSERT_EQ(deflt.code, 0) << deflt.err;
  EXPECT_EQ(deflt.out, run.out);
}

TEST(ParallelGrid, MixparGridTableHasOneRowPerRankAndTheFormula) {
  const CliRun run = mixpar_grid("--world 8 --dp 2 --tp 2 --pp 2");
  ASSERT_EQ(run.code, 0) << run.err;
  std::vector<std::string> lines;
  std::istringstream in(run.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 13u) << run.out;  // title, blank, header, 8 ranks, blank, formula
  EXPECT_EQ(lines[0], "mixpar-grid: dp 2 x tp 2 x pp 2 = 8 ranks");
  EXPECT_TRUE(lines[2].starts_with("rank  dp  tp  pp  tp group")) << lines[2];
  // Rank 5: dp 0, tp 1, pp 1; tp {4,5}, dp {5,7}, pp {1,5}, model-parallel {0,1,4,5},
  // embedding {1,5}, prev 1, no next.
  std::istringstream row(lines[3 + 5]);
  std::vector<std::string> cells;
  for (std::string cell; row >> cell;) cells.push_back(cell);
  EXPECT_EQ(cells, (std::vector<std::string>{"5", "0", "1", "1", "4,5", "5,7", "1,5", "0,1,4,5",
                                             "1,5", "1", "-"}));
  EXPECT_TRUE(lines[12].starts_with("rank = (pp x 2 + dp) x 2 + tp")) << lines[12];
}

TEST(ParallelGrid, MixparGridBadShapeExitsTwoWithOneLine) {
  // Exit code 2, nothing on stdout, one line on stderr naming the problem.
  const auto expect_one_line = [](const std::string& args, const std::string& message) {
    test_support::expect_one_line_error(mixpar_grid(args), "mixpar-grid", message, args);
  };
  expect_one_line("--world 8 --dp 3", "grid: dp 3 x tp 1 x pp 1 = 3 ranks, but the world has 8");
  expect_one_line("--world 8 --dp 2 --tp 2 --pp 3",
                  "grid: dp 2 x tp 2 x pp 3 = 12 ranks, but the world has 8");
  expect_one_line("--dp 0", "--dp must be >= 1, got 0");
  expect_one_line("--world -4", "--world must be >= 1, got -4");
  expect_one_line("--tp 100000", "--tp 100000: mixpar-grid lays out at most 4096 ranks");
  expect_one_line("--dp 64 --tp 64 --pp 64",
                  "dp 64 x tp 64 x pp 64 = 262144 ranks: mixpar-grid lays out at most 4096");
  expect_one_line("--pp 1.5", "--pp");
  expect_one_line("--world 8 --bogus 1", "--bogus");
}

}  // namespace
}  // namespace mixpar
