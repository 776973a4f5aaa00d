// DeviceMesh: the one description of the rank grid. The standard mesh [pp, dp, cp, tp] numbers
// every rank of every layout up to 16 ranks as the grid's formula always did, a group over any
// set of dimensions is exactly the ranks sharing the other coordinates, a dimension of size 1
// (a new one, "ep") changes no rank, group, text or communicator, and the grid's
// communicators are found by the dimensions they span.
#include "comm/device_mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/parallel_grid.h"
#include "comm/local_backend.h"
#include "expect.h"
#include "util/errors.h"

namespace mixpar {
namespace {

struct Degrees {
  int dp, tp, cp, pp;
};

// Every (dp, tp, cp, pp) with dp x tp x cp x pp <= max_world.
std::vector<Degrees> layouts_up_to(int max_world) {
  std::vector<Degrees> out;
  for (int dp = 1; dp <= max_world; ++dp) {
    for (int tp = 1; dp * tp <= max_world; ++tp) {
      for (int cp = 1; dp * tp * cp <= max_world; ++cp) {
        for (int pp = 1; dp * tp * cp * pp <= max_world; ++pp) out.push_back({dp, tp, cp, pp});
      }
    }
  }
  return out;
}

std::string str(const Degrees& d) {
  return "dp " + std::to_string(d.dp) + " tp " + std::to_string(d.tp) + " cp " +
         std::to_string(d.cp) + " pp " + std::to_string(d.pp);
}

// The ranks whose coordinates equal r's on every dimension not in `dims`, ascending: a group
// found by brute force, against which DeviceMesh::group is checked.
std::vector<int> brute_group(const DeviceMesh& m, int r, const std::vector<std::string>& dims) {
  std::vector<int> out;
  for (int q = 0; q < m.world(); ++q) {
    bool same = true;
    for (const MeshDim& d : m.dims()) {
      bool spanned = false;
      for (const std::string& name : dims) spanned = spanned || name == d.name;
      if (!spanned && m.coord(q, d.name) != m.coord(r, d.name)) same = false;
    }
    if (same) out.push_back(q);
  }
  return out;
}

TEST(DeviceMesh, StandardRankFormulaIsMegatronsOnEveryLayoutUpTo16Ranks) {
  const std::vector<Degrees> layouts = layouts_up_to(16);
  EXPECT_GT(layouts.size(), 100u);
  for (const Degrees& L : layouts) {
    const DeviceMesh m = DeviceMesh::standard(L.dp, L.tp, L.cp, L.pp);
    ASSERT_EQ(m.world(), L.dp * L.tp * L.cp * L.pp);
    for (int pp = 0; pp < L.pp; ++pp) {
      for (int dp = 0; dp < L.dp; ++dp) {
        for (int cp = 0; cp < L.cp; ++cp) {
          for (int tp = 0; tp < L.tp; ++tp) {
            // The grid's formula before the mesh (parallel_grid.h), written out.
            const int want = ((pp * L.dp + dp) * L.cp + cp) * L.tp + tp;
            ASSERT_EQ(m.rank_of({pp, dp, cp, tp}), want) << str(L);
            ASSERT_EQ(m.coords_of(want), (std::vector<int>{pp, dp, cp, tp})) << str(L);
            const GridCoord c = grid_coord({.dp = L.dp, .tp = L.tp, .pp = L.pp, .cp = L.cp}, want);
            ASSERT_EQ(c.dp, dp);
            ASSERT_EQ(c.tp, tp);
            ASSERT_EQ(c.cp, cp);
            ASSERT_EQ(c.pp, pp);
          }
        }
      }
    }
  }
}

TEST(DeviceMesh, AGroupIsTheRanksSharingEveryOtherCoordinate) {
  const std::vector<std::vector<std::string>> sets = {
      {"tp"}, {"dp"}, {"cp"}, {"pp"}, {"dp", "cp"}, {"pp", "tp"}, {"cp", "dp"}, {}, {"pp", "dp", "cp", "tp"}};
  for (const Degrees& L : layouts_up_to(16)) {
    const DeviceMesh m = DeviceMesh::standard(L.dp, L.tp, L.cp, L.pp);
    const GridShape s{.dp = L.dp, .tp = L.tp, .pp = L.pp, .cp = L.cp};
    for (int r = 0; r < m.world(); ++r) {
      for (const auto& dims : sets) {
        ASSERT_EQ(m.group(r, dims), brute_group(m, r, dims)) << str(L) << " rank " << r;
      }
      // The purposes of parallel_grid.h are these groups.
      EXPECT_EQ(tp_group(s, r), m.group(r, {"tp"}));
      EXPECT_EQ(dp_cp_group(s, r), m.group(r, {"dp", "cp"}));
      EXPECT_EQ(model_parallel_group(s, r), m.group(r, {"pp", "tp"}));
    }
  }
}

TEST(DeviceMesh, GroupIndexIsEqualExactlyWithinOneGroup) {
  const DeviceMesh m = DeviceMesh::standard(2, 2, 2, 2);
  for (const std::vector<std::string>& dims :
       {std::vector<std::string>{"tp"}, {"dp", "cp"}, {"pp", "tp"}}) {
    for (int r = 0; r < m.world(); ++r) {
      const std::vector<int> g = m.group(r, dims);
      for (int q = 0; q < m.world(); ++q) {
        const bool member = std::find(g.begin(), g.end(), q) != g.end();
        EXPECT_EQ(m.group_index(q, dims) == m.group_index(r, dims), member);
      }
    }
  }
}

TEST(DeviceMesh, ADimensionOfSizeOneChangesNoRankGroupOrText) {
  for (const Degrees& L : layouts_up_to(16)) {
    const DeviceMesh m = DeviceMesh::standard(L.dp, L.tp, L.cp, L.pp);
    for (const char* outer : {"pp", "dp", "cp", "tp"}) {
      const DeviceMesh e = m.with_dim({"ep", 1, false}, outer);
      ASSERT_EQ(e.dims().size(), 5u);
      EXPECT_EQ(e.world(), m.world());
      EXPECT_EQ(e.str(), m.str());
      EXPECT_EQ(e.size("ep"), 1);
      for (int r = 0; r < m.world(); ++r) {
        EXPECT_EQ(e.coord(r, "ep"), 0);
        for (const char* name : {"pp", "dp", "cp", "tp"}) {
          ASSERT_EQ(e.coord(r, name), m.coord(r, name)) << str(L) << " ep inside " << outer;
        }
        EXPECT_EQ(e.group(r, {"dp", "cp"}), m.group(r, {"dp", "cp"}));
        EXPECT_EQ(e.group(r, {"ep"}), std::vector<int>{r});
        EXPECT_EQ(e.group_index(r, {"tp"}), m.group_index(r, {"tp"}));
      }
    }
  }
}

TEST(DeviceMesh, ANameTheMeshLacksIsADimensionOfSizeOne) {
  const DeviceMesh m = DeviceMesh::standard(2, 2, 1, 1);
  EXPECT_FALSE(m.has("ep"));
  EXPECT_EQ(m.size("ep"), 1);
  EXPECT_EQ(m.size({"dp", "tp", "ep"}), 4);
  EXPECT_EQ(m.coord(3, "ep"), 0);
  EXPECT_EQ(m.group(3, {"dp", "ep"}), m.group(3, {"dp"}));
  EXPECT_EQ(m.with_coord(3, "ep", 0), 3);
  EXPECT_THROW((void)m.with_coord(3, "ep", 1), std::out_of_range);
}

TEST(DeviceMesh, TextNamesDpFirstThenInnermostOutAndLaterDimensionsOnlyAboveOne) {
  EXPECT_EQ(DeviceMesh::standard(2, 2, 1, 2).str(), "dp 2 x tp 2 x pp 2");
  EXPECT_EQ(DeviceMesh::standard(2, 2, 2, 1).str(), "dp 2 x tp 2 x cp 2 x pp 1");
  EXPECT_EQ(mesh_text(standard_dims(2, 1, 3, 1), "--"), "--dp 2 x --tp 1 x --cp 3 x --pp 1");
  EXPECT_EQ(DeviceMesh::standard(1, 1, 1, 1).with_dim({"ep", 4, false}, "dp").str(),
            "dp 1 x tp 1 x ep 4 x pp 1");
}

TEST(DeviceMesh, BadDimensionsAreRefused) {
  EXPECT_THROW(DeviceMesh({{"dp", 2}, {"dp", 2}}), std::invalid_argument);
  EXPECT_THROW(DeviceMesh({{"", 2}}), std::invalid_argument);
  EXPECT_THROW(DeviceMesh({{"dp", 0}}), std::invalid_argument);
  EXPECT_THROW(DeviceMesh({{"dp", 65536}, {"tp", 65536}}), std::invalid_argument);
  EXPECT_THROW((void)DeviceMesh::standard(1, 1, 1, 1).with_dim({"ep", 1}, "xp"),
               std::invalid_argument);
  EXPECT_THROW((void)DeviceMesh::standard(2, 1, 1, 1).rank_of({0, 2, 0, 0}), std::out_of_range);
  EXPECT_THROW((void)DeviceMesh::standard(2, 1, 1, 1).coords_of(2), std::out_of_range);
  const std::string error = test_support::input_error_of(
      [] { validate(DeviceMesh::standard(2, 2, 1, 3), 8); });
  EXPECT_EQ(error, "grid: dp 2 x tp 2 x pp 3 = 12 ranks, but the world has 8");
  EXPECT_EQ(test_support::input_error_of([] { validate_degrees(standard_dims(1, 0, 1, 1), 1); }),
            "grid: dp 1 x tp 0 x pp 1: every degree must be >= 1");
}

// The grid over a mesh with a size-1 "ep": the same communicators, in the same splits, as the
// standard mesh's; and a group is found by the dimensions it spans, size-1 ones dropped.
TEST(ParallelGridMesh, AnExtraDimensionOfSizeOneSplitsTheSameCommunicators) {
  const DeviceMesh standard = DeviceMesh::standard(2, 2, 2, 1);
  for (const DeviceMesh& m : {standard, standard.with_dim({"ep", 1, false}, "dp")}) {
    run_local(8, [&](Communicator& world) {
      const ParallelGrid g(world, m);
      const int r = world.rank();
      EXPECT_EQ(g.coord("ep"), 0);
      EXPECT_EQ(g.coord("cp"), g.coord().cp);
      EXPECT_EQ(world.traffic().totals("split").calls, 7);
      EXPECT_EQ(&g.group({"tp"}), &g.tp());
      EXPECT_EQ(&g.group({"cp", "dp"}), &g.dp_cp());
      EXPECT_EQ(&g.group({"dp", "cp", "ep"}), &g.dp_cp());
      // pp is 1: the model-parallel group spans tp alone, and tp's communicator is found.
      EXPECT_EQ(&g.group({"tp", "pp"}), &g.tp());
      const std::vector<int> dp_cp = m.group(r, {"dp", "cp"});
      EXPECT_EQ(g.dp_cp().size(), 4);
      EXPECT_EQ(g.dp_cp().rank(),
                static_cast<int>(std::find(dp_cp.begin(), dp_cp.end(), r) - dp_cp.begin()));
      EXPECT_THROW((void)g.group({"dp", "tp"}), std::logic_error);
    });
  }
}

TEST(ParallelGridMesh, GroupsAreNamedInTheGridsOrderAndDpCpIsDpWithoutCp) {
  run_local(4, [&](Communicator& world) {
    const ParallelGrid g(world, GridShape{.dp = 2, .tp = 2, .pp = 1});
    std::vector<std::string> names;
    for (const auto& [name, comm] : g.groups()) {
      names.push_back(name);
      if (name == "cp" || name == "dp_cp") {
        EXPECT_EQ(comm, nullptr) << name;
      }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"dp", "tp", "pp", "model_parallel", "embedding",
                                               "cp", "dp_cp"}));
    EXPECT_EQ(&g.dp_cp(), &g.dp());
    EXPECT_EQ(&g.group({"dp", "cp"}), &g.dp());
  });
}

}  // namespace
}  // namespace mixpar
