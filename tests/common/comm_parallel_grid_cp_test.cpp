// ParallelGrid with context parallelism: the fourth dimension cp sits between tp and dp
// (Megatron-LM's tp-cp-dp-pp order), cp 1 is the 3D grid unchanged, every group (the cp and
// dp-cp groups included) partitions the world, the communicators match the layout on a
// 2 x 2 x 2 x 2 grid of 16 ranks (a gradient summed over dp-cp adds dp x cp ranks), and
// mixpar-grid --cp prints it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/local_backend.h"
#include "comm/parallel_grid.h"
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

std::string str(const GridShape& s) {
  return "dp " + std::to_string(s.dp) + " x tp " + std::to_string(s.tp) + " x cp " +
         std::to_string(s.cp) + " x pp " + std::to_string(s.pp);
}

// Every (dp, tp, pp, cp) with dp x tp x pp x cp <= max_world.
std::vector<GridShape> shapes_up_to(int max_world) {
  std::vector<GridShape> out;
  for (int dp = 1; dp <= max_world; ++dp) {
    for (int tp = 1; dp * tp <= max_world; ++tp) {
      for (int pp = 1; dp * tp * pp <= max_world; ++pp) {
        for (int cp = 1; dp * tp * pp * cp <= max_world; ++cp) out.push_back({dp, tp, pp, cp});
      }
    }
  }
  return out;
}

TEST(ParallelGridCp, RankFormulaIsTpFastestThenCpThenDpThenPp) {
  const GridShape s{.dp = 3, .tp = 2, .pp = 2, .cp = 4};  // 48 ranks, all degrees but one differ
  for (int pp = 0; pp < s.pp; ++pp) {
    for (int dp = 0; dp < s.dp; ++dp) {
      for (int cp = 0; cp < s.cp; ++cp) {
        for (int tp = 0; tp < s.tp; ++tp) {
          const int r = grid_rank(s, dp, tp, pp, cp);
          EXPECT_EQ(r, ((pp * s.dp + dp) * s.cp + cp) * s.tp + tp);
          const GridCoord c = grid_coord(s, r);
          EXPECT_EQ(c.dp, dp);
          EXPECT_EQ(c.tp, tp);
          EXPECT_EQ(c.pp, pp);
          EXPECT_EQ(c.cp, cp);
        }
      }
    }
  }
  EXPECT_THROW(grid_rank(s, 0, 0, 0, 4), std::out_of_range);
}

TEST(ParallelGridCp, CpOneIsTheThreeDimensionalGridUnchanged) {
  for (const GridShape& s : shapes_up_to(16)) {
    if (s.cp != 1) continue;
    for (int r = 0; r < s.world(); ++r) {
      const GridCoord c = grid_coord(s, r);
      EXPECT_EQ(r, (c.pp * s.dp + c.dp) * s.tp + c.tp) << str(s);
      EXPECT_EQ(c.cp, 0);
      EXPECT_EQ(cp_group(s, r), Group{r});
      EXPECT_EQ(dp_cp_group(s, r), dp_group(s, r));
    }
  }
}

TEST(ParallelGridCp, TwoByTwoByTwoGroupsHaveTheExpectedMembers) {
  const GridShape s{.dp = 2, .tp = 2, .pp = 1, .cp = 2};  // the header's picture
  EXPECT_EQ(tp_group(s, 2), (Group{2, 3}));
  EXPECT_EQ(cp_group(s, 1), (Group{1, 3}));
  EXPECT_EQ(cp_group(s, 4), (Group{4, 6}));
  EXPECT_EQ(dp_group(s, 2), (Group{2, 6}));
  EXPECT_EQ(dp_cp_group(s, 0), (Group{0, 2, 4, 6}));
  EXPECT_EQ(dp_cp_group(s, 7), (Group{1, 3, 5, 7}));
  EXPECT_EQ(model_parallel_group(s, 3), (Group{2, 3}));
}

TEST(ParallelGridCp, EveryGroupPartitionsTheWorld) {
  const std::vector<std::pair<const char*, std::function<Group(const GridShape&, int)>>> kinds = {
      {"tp", tp_group}, {"dp", dp_group},       {"pp", pp_group},
      {"cp", cp_group}, {"dp-cp", dp_cp_group}, {"model-parallel", model_parallel_group}};
  for (const GridShape& s : shapes_up_to(16)) {
    const int sizes[] = {s.tp, s.dp, s.pp, s.cp, s.dp * s.cp, s.tp * s.pp};
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      std::vector<int> covered(static_cast<std::size_t>(s.world()), 0);
      for (int r = 0; r < s.world(); ++r) {
        const Group g = kinds[k].second(s, r);
        ASSERT_EQ(static_cast<int>(g.size()), sizes[k]) << kinds[k].first << " " << str(s);
        EXPECT_TRUE(std::is_sorted(g.begin(), g.end())) << kinds[k].first << " " << str(s);
        EXPECT_NE(std::find(g.begin(), g.end(), r), g.end()) << kinds[k].first << " " << str(s);
        for (int m : g) EXPECT_EQ(kinds[k].second(s, m), g) << kinds[k].first << " " << str(s);
        if (g.front() == r) {
          for (int m : g) ++covered[static_cast<std::size_t>(m)];
        }
      }
      for (int n : covered) EXPECT_EQ(n, 1) << kinds[k].first << " " << str(s);
    }
  }
}

TEST(ParallelGridCp, ProductMismatchNamesCp) {
  EXPECT_EQ(test_support::input_error_of([] { validate({.dp = 2, .tp = 2, .pp = 1, .cp = 3}, 8); }),
            "grid: dp 2 x tp 2 x cp 3 x pp 1 = 12 ranks, but the world has 8");
}

// 16 ranks as dp 2 x tp 2 x cp 2 x pp 2: each communicator is the pure layout's group (the
// constructor checks), and one all-reduce of 1 per group counts its members: the dp-cp group,
// where the gradients of replicated parameters are summed, adds dp x cp = 4.
TEST(ParallelGridCp, SixteenRanksCommunicatorsMatchAndDpCpSumsOverDpTimesCp) {
  const GridShape s{.dp = 2, .tp = 2, .pp = 2, .cp = 2};
  run_local(16, [&](Communicator& world) {
    const ParallelGrid g(world, s);
    ASSERT_NE(g.cp(), nullptr);
    EXPECT_EQ(g.cp()->size(), 2);
    EXPECT_EQ(g.cp()->rank(), g.coord().cp);
    EXPECT_EQ(g.dp_cp().size(), 4);
    EXPECT_EQ(g.dp().size(), 2);
    EXPECT_EQ(g.tp().size(), 2);
    EXPECT_EQ(g.pp().size(), 2);
    Tensor one = Tensor::from_floats(std::vector<float>{float(world.rank())}, {1});
    g.dp_cp().all_reduce(one);
    float want = 0;
    for (int m : dp_cp_group(s, world.rank())) want += float(m);
    EXPECT_EQ(one.item(), want);
  });
  // cp 1: no cp communicator, and dp_cp() is dp() itself.
  run_local(4, [&](Communicator& world) {
    const ParallelGrid g(world, {.dp = 2, .tp = 2, .pp = 1});
    EXPECT_EQ(g.cp(), nullptr);
    EXPECT_EQ(&g.dp_cp(), &g.dp());
  });
}

using test_support::CliRun;

CliRun mixpar_grid(const std::string& args) {
  const test_support::TempDir dir;
  return test_support::run_shell(dir, std::string("'") + MIXPAR_GRID_PATH + "' " + args);
}

TEST(ParallelGridCp, MixparGridCpPrintsTheCpAndDpCpGroups) {
  const CliRun run = mixpar_grid("--dp 2 --tp 2 --cp 2");
  ASSERT_EQ(run.code, 0) << run.err;
  std::vector<std::string> lines;
  std::istringstream in(run.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_GE(lines.size(), 13u) << run.out;
  EXPECT_EQ(lines[0], "mixpar-grid: dp 2 x tp 2 x cp 2 x pp 1 = 8 ranks");
  EXPECT_TRUE(
      lines[2].starts_with("rank  dp  tp  cp  pp  tp group  dp group  cp group  dp-cp group"))
      << lines[2];
  // Rank 6: dp 1, tp 0, cp 1; tp {6,7}, dp {2,6}, cp {4,6}, dp-cp {0,2,4,6}.
  std::istringstream row(lines[3 + 6]);
  std::vector<std::string> cells;
  for (std::string cell; row >> cell;) cells.push_back(cell);
  EXPECT_EQ(cells, (std::vector<std::string>{"6", "1", "0", "1", "0", "6,7", "2,6", "4,6",
                                             "0,2,4,6", "6", "6,7", "6", "-", "-"}));
  const CliRun json = mixpar_grid("--dp 2 --tp 2 --cp 2 --json");
  ASSERT_EQ(json.code, 0) << json.err;
  const Json j = Json::parse(json.out, "mixpar-grid --json");
  EXPECT_EQ(j.at("groups").at("dp_cp"), Json::parse("[[0, 2, 4, 6], [1, 3, 5, 7]]"));
  EXPECT_EQ(j.at("groups").at("cp"), Json::parse("[[0, 2], [1, 3], [4, 6], [5, 7]]"));
  test_support::expect_one_line_error(
      mixpar_grid("--world 8 --cp 3"), "mixpar-grid",
      "grid: dp 1 x tp 1 x cp 3 x pp 1 = 3 ranks, but the world has 8", "--world 8 --cp 3");
  test_support::expect_one_line_error(mixpar_grid("--cp 0"), "mixpar-grid",
                                      "--cp must be >= 1, got 0", "--cp 0");
}

}  // namespace
}  // namespace mixpar
