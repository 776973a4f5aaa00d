// The gradient sync's decorators forward through one base: ForwardingGradSync hands every
// method of StepSync, ShardOwnership and SyncTelemetry to the sync it wraps, and chapter 6's
// CpGradSync and chapter 8's TiedEmbeddingFirst, built on it, let every method reach the
// inner sync (each adds its own work around some of them). A recording inner sync proves it.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ch06_tensor_parallel/cp_grad_sync.h"
#include "comm/local_backend.h"
#include "model/gpt_params.h"
#include "parallel/forwarding_sync.h"
#include "tied_embedding_sync.h"

namespace mixpar::ch08 {
namespace {

// Every method of the three interfaces, by name.
const std::set<std::string> kEveryMethod = {
    "averages", "begin_step", "last_backward_starts", "grad_ready", "finish",
    "sharding_stage", "owned_pieces", "owned_params", "owned_grads", "owned_weight_decay",
    "norm_counted", "counted_sum_of_squares", "gather_params", "whole_params",
    "describe", "take_comm_seconds", "take_spans", "own_bytes_sent"};

// Records each call by name and answers with values no default would give.
class RecordingSync final : public GradSync {
 public:
  explicit RecordingSync(std::vector<std::string>& calls) : calls_(calls) {}

  bool averages() const override { return noted("averages", true); }
  void begin_step() override { note("begin_step"); }
  void last_backward_starts(int m) override {
    note("last_backward_starts");
    micro_batches = m;
  }
  void grad_ready(std::size_t entry) override {
    note("grad_ready");
    ready.push_back(entry);
  }
  double finish() override { return noted("finish", 1.5); }

  int sharding_stage() const override { return noted("sharding_stage", 2); }
  std::vector<OwnedPiece> owned_pieces(const ParamRegistry&) const override {
    return noted("owned_pieces", std::vector<OwnedPiece>{{1, 3, 4}});
  }
  std::vector<Tensor> owned_params(ParamRegistry& p) const override {
    return noted("owned_params", std::vector<Tensor>{p.entries()[1].param});
  }
  std::vector<Tensor> owned_grads(ParamRegistry& p) const override {
    return noted("owned_grads", std::vector<Tensor>{p.entries()[1].grad});
  }
  std::vector<bool> owned_weight_decay(const ParamRegistry&) const override {
    return noted("owned_weight_decay", std::vector<bool>{false, true});
  }
  std::vector<bool> norm_counted(const ParamRegistry&, const GridCoord&) const override {
    return noted("norm_counted", std::vector<bool>{true, false});
  }
  double counted_sum_of_squares(std::span<const Tensor>, const std::vector<bool>&) const override {
    return noted("counted_sum_of_squares", 42.0);
  }
  void gather_params() override { note("gather_params"); }
  std::vector<Tensor> whole_params(const ParamRegistry&,
                                   std::span<const Tensor>) const override {
    return noted("whole_params", std::vector<Tensor>(3));
  }

  std::string describe() const override { return noted("describe", "recording"); }
  double take_comm_seconds() override { return noted("take_comm_seconds", 0.25); }
  std::vector<TraceSpan> take_spans() override {
    return noted("take_spans", std::vector<TraceSpan>{{"inner", "comm", 0, 0, 0, 1}});
  }
  std::uint64_t own_bytes_sent() const override {
    return noted("own_bytes_sent", std::uint64_t{77});
  }

  int micro_batches = 0;
  std::vector<std::size_t> ready;

 private:
  void note(const char* method) const { calls_.push_back(method); }
  template <class T>
  T noted(const char* method, T answer) const {
    note(method);
    return answer;
  }
  std::vector<std::string>& calls_;
};

// "ln_f.weight" then "wte.weight": a registry a tied-embedding stage could hold.
ParamRegistry two_entries() {
  ParamRegistry r;
  r.add("ln_f.weight", {4}, false, ParamInit::kOnes);
  r.add("wte.weight", {8, 4}, true, ParamInit::kOnes);
  r.allocate(DType::kF32);
  return r;
}

// Calls every method of `sync` once, a step's in a step's order.
void call_every_method(GradSync& sync, ParamRegistry& params) {
  sync.begin_step();
  sync.last_backward_starts(2);
  sync.grad_ready(0);  // ln_f: not the entry TiedEmbeddingFirst holds back
  (void)sync.finish();
  (void)sync.averages();
  (void)sync.sharding_stage();
  (void)sync.owned_pieces(params);
  (void)sync.owned_params(params);
  (void)sync.owned_grads(params);
  (void)sync.owned_weight_decay(params);
  (void)sync.norm_counted(params, GridCoord{});
  (void)sync.counted_sum_of_squares({}, {true, true});
  sync.gather_params();
  (void)sync.whole_params(params, {});
  (void)sync.describe();
  (void)sync.take_comm_seconds();
  (void)sync.take_spans();
  (void)sync.own_bytes_sent();
}

std::set<std::string> names(const std::vector<std::string>& calls) {
  return {calls.begin(), calls.end()};
}

TEST(ForwardingGradSync, ForwardsEveryMethodToTheInnerSync) {
  std::vector<std::string> calls;
  auto inner = std::make_unique<RecordingSync>(calls);
  RecordingSync& rec = *inner;
  ForwardingGradSync sync(std::move(inner));
  ParamRegistry params = two_entries();
  call_every_method(sync, params);
  // Each method reached the inner sync once, in the order called.
  const std::vector<std::string> in_order = {
      "begin_step", "last_backward_starts", "grad_ready", "finish", "averages",
      "sharding_stage", "owned_pieces", "owned_params", "owned_grads", "owned_weight_decay",
      "norm_counted", "counted_sum_of_squares", "gather_params", "whole_params", "describe",
      "take_comm_seconds", "take_spans", "own_bytes_sent"};
  EXPECT_EQ(calls, in_order);
  EXPECT_EQ(names(calls), kEveryMethod);
  // And the inner sync's answers come back unchanged, its arguments reach it.
  EXPECT_EQ(rec.micro_batches, 2);
  EXPECT_EQ(rec.ready, std::vector<std::size_t>{0});
  EXPECT_EQ(sync.finish(), 1.5);
  EXPECT_EQ(sync.sharding_stage(), 2);
  EXPECT_EQ(sync.owned_pieces(params).front().entry_offset, 3);
  EXPECT_EQ(sync.owned_params(params).front().numel(), 32);
  EXPECT_EQ(sync.owned_weight_decay(params), (std::vector<bool>{false, true}));
  EXPECT_EQ(sync.norm_counted(params, GridCoord{}), (std::vector<bool>{true, false}));
  EXPECT_EQ(sync.counted_sum_of_squares({}, {}), 42.0);
  EXPECT_EQ(sync.whole_params(params, {}).size(), 3u);
  EXPECT_EQ(sync.describe(), "recording");
  EXPECT_EQ(sync.take_comm_seconds(), 0.25);
  EXPECT_EQ(sync.take_spans().front().name, "inner");
  EXPECT_EQ(sync.own_bytes_sent(), 77u);
}

TEST(GradSyncDecorators, CpGradSyncAndTiedEmbeddingFirstLetEveryMethodReachTheInnerSync) {
  run_local(1, [](Communicator& world) {
    ParamRegistry params = two_entries();
    {
      std::vector<std::string> calls;
      ch06::CpGradSync cp(std::make_unique<RecordingSync>(calls), world, params);
      call_every_method(cp, params);
      EXPECT_EQ(names(calls), kEveryMethod);
      EXPECT_EQ(cp.sharding_stage(), 2);  // cp shards nothing of its own
      EXPECT_EQ(cp.own_bytes_sent(), 77u);
    }
    {
      std::vector<std::string> calls;
      TiedEmbeddingFirst tied(std::make_unique<RecordingSync>(calls), params, world, 0);
      call_every_method(tied, params);
      EXPECT_EQ(names(calls), kEveryMethod);
      EXPECT_EQ(tied.owned_weight_decay(params), (std::vector<bool>{false, true}));
      EXPECT_EQ(tied.own_bytes_sent(), 77u);
    }
  });
}

}  // namespace
}  // namespace mixpar::ch08
