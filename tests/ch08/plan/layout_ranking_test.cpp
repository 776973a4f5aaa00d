// mixpar-plan's answer (layout_ranking.h) on the cases the issue names: a 70B model on 64
// H100s ranks fitting layouts fastest first in seconds, a model that fits nothing names the
// smallest bill, the presets and the Llama stand-ins are what they say, bad clusters refused.
#include "layout_ranking.h"

#include <gtest/gtest.h>

#include <cmath>

#include "util/errors.h"

namespace mixpar::plan {
namespace {

TEST(PlanRanking, SeventyBOnSixtyFourH100sRanksFittingLayoutsFastestFirst) {
  Cluster c = cluster_preset("h100-80gb-nvlink-ib400", "");
  c.devices = 64;
  SearchSpace s;
  s.global_batch = 128;
  s.seq = 4096;
  const Ranking r = rank_layouts(s, model_preset("70b", 4096).shape, c);
  ASSERT_FALSE(r.layouts.empty());
  EXPECT_GT(r.refused, 0);
  EXPECT_GT(r.too_big, 0);  // e.g. dp 64 without ZeRO: 16 bytes x 70B on each device
  for (std::size_t i = 0; i < r.layouts.size(); ++i) {
    const RankedLayout& l = r.layouts[i];
    EXPECT_GE(l.headroom_bytes, 0);
    EXPECT_TRUE(std::isfinite(l.time.total()) && l.time.total() > 0);
    if (i > 0) {
      EXPECT_LE(r.layouts[i - 1].time.total(), l.time.total());
    }
  }
  // The best predicted MFU is below the GEMM efficiency's ceiling.
  const RankedLayout& best = r.layouts.front();
  EXPECT_LT(best.time.flops_per_step / best.time.total() / (c.peak_flops * 64), c.gemm_eff_max);
  EXPECT_NE(why_faster(best, r.layouts[1]).find("largest difference"), std::string::npos);
}

TEST(PlanRanking, AModelThatFitsNothingNamesTheSmallestBill) {
  const Cluster c = cluster_preset("h100-80gb-nvlink-ib400", "");
  SearchSpace s;
  s.global_batch = 8;
  s.seq = 4096;
  const GptConfig model = model_preset("405b", 4096).shape;
  const Ranking r = rank_layouts(s, model, c);
  EXPECT_TRUE(r.layouts.empty());
  // However it is split, 16 bytes of states per parameter over 8 devices stay on them: the
  // smallest bill is at least that, about 810 GB a device, and is the bill of its layout.
  EXPECT_GE(r.smallest_bytes, 16 * model.num_parameters() / 8);
  EXPECT_EQ(r.smallest_bytes, device_memory(r.smallest_layout, model, 4096, c).total());
}

TEST(PlanModels, LlamaStandInsHaveTheNearestParameterCountsToThePublished) {
  for (const auto& [name, params] : {std::pair{"8b", 8'030'261'248.0},
                                     std::pair{"70b", 70'553'706'496.0},
                                     std::pair{"405b", 405'853'388'800.0}}) {
    const PlanModel m = model_preset(name, 8192);
    // The nearest of the widths that are multiples of n_head (within 1% of the count).
    EXPECT_NEAR(static_cast<double>(m.shape.num_parameters()) / params, 1.0, 0.01) << name;
    ASSERT_EQ(m.shape.n_embd % m.shape.n_head, 0) << name;
    for (std::int64_t step : {-m.shape.n_head, m.shape.n_head}) {
      GptConfig other = m.shape;
      other.n_embd += step;
      EXPECT_LE(std::fabs(static_cast<double>(m.shape.num_parameters()) - params),
                std::fabs(static_cast<double>(other.num_parameters()) - params))
          << name;
    }
    EXPECT_FALSE(m.note.empty());
  }
  EXPECT_TRUE(model_preset("gpt2-124m", 1024).note.empty());
  EXPECT_EQ(model_preset("gpt2-124m", 1024).shape.num_parameters(), 124439808);
  EXPECT_THROW(model_preset("gpt5", 1024), InputError);
}

TEST(PlanCluster, PresetsAreValidAndImpossibleClustersAreRefused) {
  for (const char* name : {"h100-80gb-nvlink-ib400", "a100-80gb"}) {
    EXPECT_NO_THROW(validate(cluster_preset(name, "")));
  }
  EXPECT_THROW(cluster_preset("tpu-v5", ""), InputError);
  EXPECT_THROW(cluster_preset("this-machine", "/nonexistent/this-machine.json"), InputError);
  const Cluster ok = cluster_preset("h100-80gb-nvlink-ib400", "");
  Cluster c = ok;
  c.devices = 0;
  EXPECT_THROW(validate(c), InputError);
  c = ok;
  c.devices = 12;
  EXPECT_THROW(validate(c), InputError);
  c = ok;
  c.inter.bandwidth = -1;
  EXPECT_THROW(validate(c), InputError);
  EXPECT_EQ(cluster_from_json(to_json(ok), "test").intra.bandwidth, ok.intra.bandwidth);
}

}  // namespace
}  // namespace mixpar::plan
