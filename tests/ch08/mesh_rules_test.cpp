// The mesh rules (mesh_rules.h): every rule between the mesh's dimensions and the model is
// refused by validate() as one InputError naming the rule, with the text the flags' errors
// always had; every rule of the table is exercised here; and the run's mesh is [pp, dp, cp, tp]
// with any extra dimension where it is placed.
#include "mesh_rules.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "trainer_config.h"

namespace mixpar::ch08 {
namespace {

struct Broken {
  const char* rule;
  std::function<void(TrainerConfig&)> edit;
  const char* message;  // after "mesh rule <rule>: "
};

// A valid 4-layer, 4-head config on one rank, which each edit breaks one way.
TrainerConfig valid() {
  TrainerConfig c = test::tiny_config();
  c.model = GptConfig{4, 4, 32, 16, 256};
  c.seq = 16;
  return c;
}

const std::vector<Broken>& broken() {
  static const std::vector<Broken> cases = {
      {"degrees", [](TrainerConfig& c) { c.extra_dims.push_back({{"ep", 0, false}, "dp"}); },
       "--ep 0: every degree must be >= 1"},
      {"world", [](TrainerConfig& c) { c.dp = 2; },
       "--dp 2 x --tp 1 x --pp 1 = 2 ranks, but the run has 1 (--ranks, or mpirun's -np): every "
       "rank has one place in the grid"},
      {"unused-dimension",
       [](TrainerConfig& c) {
         c.extra_dims.push_back({{"ep", 2, false}, "dp"});
         c.ranks = 2;
       },
       "ep 2: no strategy of this trainer splits over ep (its degree must be 1)"},
      {"cp-divides-seq",
       [](TrainerConfig& c) {
         c.cp = 3;
         c.ranks = 3;
       },
       "--cp 3: --seq 16 is not divisible by 2 x cp = 6 (the balanced split gives each rank "
       "chunks r and 2cp-1-r)"},
      {"cp-divides-heads",
       [](TrainerConfig& c) {
         c.cp = 8;
         c.ranks = 8;
         c.cp_algo = "all-to-all";
       },
       "--cp-algo all-to-all: --cp 8 does not divide the 4 heads of a tp rank: each cp rank "
       "takes whole heads"},
      {"tp-divides-heads",
       [](TrainerConfig& c) {
         c.tp = 3;
         c.ranks = 3;
       },
       "--tp 3 does not divide n_head = 4: each tp rank holds whole attention heads"},
      {"sequence-parallel-needs-tp", [](TrainerConfig& c) { c.sequence_parallel = true; },
       "--sequence-parallel splits the LayerNorm regions over the tp ranks: it needs --tp > 1"},
      {"sequence-parallel-rows",
       [](TrainerConfig& c) {
         c.tp = 4;
         c.ranks = 4;
         c.sequence_parallel = true;
         c.batch = 1;
         c.seq = 6;
       },
       "--sequence-parallel: --batch x --seq = 6 rows do not split over --tp 4"},
      {"virtual-stages-need-pp", [](TrainerConfig& c) { c.virtual_stages = 2; },
       "--virtual-stages 2 needs --pp > 1"},
      {"v-schedule-two-chunks",
       [](TrainerConfig& c) {
         c.pp = 2;
         c.ranks = 2;
         c.pipeline_schedule = "zb-v";
       },
       "--schedule zb-v places two chunks on each pp rank in a V (stages r and 2 pp - 1 - r): "
       "it needs --virtual-stages 2, got 1"},
      {"pp-has-blocks",
       [](TrainerConfig& c) {
         c.pp = 4;
         c.ranks = 4;
         c.virtual_stages = 2;
         c.pipeline_schedule = "interleaved";
       },
       "--pp 4 x --virtual-stages 2 = 8 stages for 4 blocks: every stage needs a block to run"},
      {"pp-whole-activations",
       [](TrainerConfig& c) {
         c.pp = 2;
         c.tp = 2;
         c.ranks = 4;
         c.sequence_parallel = true;
       },
       "--pp 2 with --tp 2 --sequence-parallel: the pipeline sends whole [B, T, C] activations; "
       "drop --sequence-parallel"},
      {"pp-zero-stage",
       [](TrainerConfig& c) {
         c.pp = 2;
         c.dp = 2;
         c.ranks = 4;
         c.zero_stage = 2;
       },
       "--pp 2 with --zero-stage 2: ZeRO-2/3 would reduce-scatter or gather a stage's gradients "
       "or parameters at every micro-batch (DeepSpeed refuses them with pipelines too); use "
       "--zero-stage 1 or 0"},
      // Chapter 9: expert parallelism borrowed from dp x cp.
      {"ep-needs-experts",
       [](TrainerConfig& c) {
         c.dp = c.ranks = 2;
         c.ep = 2;
       },
       "--ep 2 shards the experts of MoE blocks: it needs --n-experts > 0"},
      {"ep-divides-experts",
       [](TrainerConfig& c) {
         c.dp = c.ranks = 2;
         c.moe.n_experts = 3;
         c.ep = 2;
       },
       "--ep 2 does not divide --n-experts 3: each ep rank holds the same number of whole "
       "experts"},
      {"ep-divides-dp-cp",
       [](TrainerConfig& c) {
         c.dp = c.ranks = 2;
         c.moe.n_experts = 4;
         c.ep = 4;
       },
       "--ep 4 does not divide --dp x --cp = 2: the ep ranks are borrowed from the "
       "data-parallel ranks (dp x cp = edp x ep)"},
      {"moe-dimensions",
       [](TrainerConfig& c) {
         c.tp = c.ranks = 2;
         c.sequence_parallel = true;
         c.moe.n_experts = 4;
       },
       "--sequence-parallel with --n-experts: not supported with MoE blocks yet (the MoE layer "
       "takes whole rows; MoE runs over dp, cp, pp, ep and tp)"},
  };
  return cases;
}

TEST(MeshRules, EveryRuleRefusesALayoutThatBreaksItNamingTheRule) {
  EXPECT_NO_THROW(validate(valid()));
  for (const Broken& b : broken()) {
    TrainerConfig c = valid();
    b.edit(c);
    EXPECT_EQ(test::input_error_of([&] { validate(c); }),
              std::string("mesh rule ") + b.rule + ": " + b.message)
        << b.rule;
  }
}

TEST(MeshRules, EveryRuleOfTheTableIsExercised) {
  std::set<std::string> table, tested;
  for (const MeshRule& r : mesh_rules()) EXPECT_TRUE(table.insert(r.name).second) << r.name;
  for (const Broken& b : broken()) tested.insert(b.rule);
  EXPECT_EQ(tested, table);
}

TEST(MeshRules, LayoutsKeepingEveryRulePass) {
  const std::vector<std::function<void(TrainerConfig&)>> layouts = {
      [](TrainerConfig& c) { c.dp = c.tp = c.pp = 2, c.ranks = 8, c.zero_stage = 1; },
      [](TrainerConfig& c) { c.tp = 4, c.ranks = 4, c.sequence_parallel = true; },
      [](TrainerConfig& c) { c.cp = 2, c.dp = 2, c.ranks = 4, c.cp_algo = "all-to-all"; },
      [](TrainerConfig& c) { c.dp = 2, c.ranks = 2, c.zero_stage = 3; },
      [](TrainerConfig& c) { c.pp = 2, c.ranks = 2, c.virtual_stages = 2; },
      [](TrainerConfig& c) {
        c.pp = 2, c.ranks = 2, c.virtual_stages = 2, c.pipeline_schedule = "dualpipev";
      },
      [](TrainerConfig& c) { c.extra_dims.push_back({{"ep", 1, false}, "cp"}); },
      [](TrainerConfig& c) { c.dp = 4, c.ranks = 4, c.moe.n_experts = 8, c.ep = 4; },
  };
  for (const auto& edit : layouts) {
    TrainerConfig c = valid();
    edit(c);
    EXPECT_NO_THROW(check_mesh_rules(c)) << test::input_error_of([&] { check_mesh_rules(c); });
  }
}

TEST(MeshRules, TheRunsMeshIsPpDpCpTpWithExtraDimensionsWhereTheySay) {
  TrainerConfig c = valid();
  c.dp = 2, c.tp = 3, c.cp = 1, c.pp = 4;
  c.extra_dims.push_back({{"ep", 1, false}, "dp"});
  std::vector<std::string> names;
  const DeviceMesh mesh = mesh_of(c);
  for (const MeshDim& d : mesh.dims()) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{"pp", "dp", "ep", "cp", "tp"}));
  EXPECT_EQ(mesh.str(), "dp 2 x tp 3 x pp 4");
  c.extra_dims[0].outer = "xp";
  EXPECT_EQ(test::input_error_of([&] { (void)mesh_dims(c); }),
            "mesh: dimension ep is placed inside xp, which the mesh does not have");
}

}  // namespace
}  // namespace mixpar::ch08
