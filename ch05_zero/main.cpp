// ch05_zero: ZeRO's memory bill (the paper's 7.5B-parameter, 64-GPU column from chapter 3's
// calculator beside a small GPT's ledger), the bytes each rank sends, ZeRO stages 1, 2 and 3
// against DDP bit for bit, and the failure modes (--bug shows one alone). A failed claim exits
// with 1, a bad flag with 2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ch03_master_weights/memory_calculator.h"
#include "ch05_zero/zero_demo_flags.h"
#include "ch05_zero/zero_lesson.h"
#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"
#include "tensor/ledger.h"
#include "util/errors.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch05;

std::size_t at(const RankResult& r, MemCategory c) { return r.mem[static_cast<std::size_t>(c)]; }

const char* run_name(int stage) {
  static const char* const kNames[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
  return kNames[stage];
}

// The paper's model-state categories from rank 0's ledger (the 16-bit parameters and
// gradients, the FP32 masters, Adam's moments: its 2 + 2 + 12 bytes), without the FP32
// gradient copy unscaling needs (4 bytes per element the optimizer steps: 16-bit runs only).
std::size_t paper_states(const RankResult& x) {
  return at(x, MemCategory::kParameters) + at(x, MemCategory::kGradients) -
         4 * static_cast<std::size_t>(x.owned) + at(x, MemCategory::kMasterParams) +
         at(x, MemCategory::kOptimizerState);
}

void print_paper_column(ClaimTable& checks) {
  std::printf(
      "\n== 1. Model states per GPU, mixed precision with Adam (ZeRO paper, Table 1 column\n"
      "   Psi = 7.5B, N_d = 64): (2+2+12)P, (2+2+12/N)P, (2+14/N)P, 16P/N, from mixpar-mem's\n"
      "   calculator (1 GB = 1e9 bytes); measured: rank 0's ledger after one step of the small\n"
      "   GPT of section 2 on 64 rank threads (bf16), bytes per parameter x 7.5B, the FP32\n"
      "   gradient copy the paper does not count left out (section 4)\n");
  const double expected[] = {120.0, 31.4, 16.6, 1.9};
  TextTable t({"stage", "params", "grads", "masters", "moments", "total", "paper", "measured"});
  for (int stage = 0; stage <= 3; ++stage) {
    LessonSetup m;
    m.ranks = 64;
    m.zero_stage = stage;
    m.steps = 1;
    m.bucket_cap_bytes = std::size_t{1} << 30;  // one bucket: padding below one element a rank
    const RankResult x = run_lesson(m)[0];
    const double measured = static_cast<double>(paper_states(x)) /
                            static_cast<double>(x.params) * 7.5e9 / 1e9;
    const mem::ModelStates s = mem::model_states(7'500'000'000, mem::Precision::kFp16,
                                                   mem::Optimizer::kAdamW, stage, 64);
    auto gb = [](std::int64_t b) { return fmt("%.2f GB", static_cast<double>(b) / 1e9); };
    t.add({std::to_string(stage), gb(s.parameters), gb(s.gradients), gb(s.master_params),
           gb(s.optimizer_state), gb(s.total()), fmt("%.1f GB", expected[stage]),
           fmt("%.2f GB", measured)});
    const double total = static_cast<double>(s.total()) / 1e9;
    checks.add({{fmt("stage %d: the paper's %.1f GB (rounded as the paper rounds)", stage,
                     expected[stage]),
                 fmt("%.1f", expected[stage]), fmt("%.2f", total),
                 std::fabs(total - expected[stage]) < 0.06}});
    // Padding (ZeRO-3: each unit padded to a multiple of 64) adds under 1% here.
    checks.add({{fmt("stage %d: the ledger of 64 ranks, scaled to 7.5B, within 1%% of the "
                     "calculator", stage),
                 fmt("%.2f", total), fmt("%.2f", measured),
                 measured >= total * 0.9999 && measured <= total * 1.01}});
  }
  std::printf("%s", t.str().c_str());
}

void print_measured_bill(ClaimTable& checks) {
  std::printf(
      "\n== 2. A small GPT (2 layers, width 32, bf16 + FP32 masters + AdamW), each rank's ledger\n"
      "   after training: DDP keeps everything on every rank; ZeRO-1 keeps 1/N of the masters\n"
      "   and moments, and of the FP32 gradient copy that unscaling needs (4P/N more); ZeRO-2\n"
      "   also keeps only its padded shard of the 16-bit gradients (2P'/N); ZeRO-3 also of the\n"
      "   16-bit parameters (2P'/N, P' padded per unit: a block, ln_f, wte with wpe)\n");
  TextTable t({"run", "rank", "P", "owned", "params", "grads (16-bit + FP32)", "masters",
               "moments", "model states"});
  for (int n : {2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      LessonSetup s;
      s.ranks = n;
      s.zero_stage = stage;
      const std::vector<RankResult> runs = run_lesson(s);
      bool ok = true;
      std::int64_t owned_sum = 0;
      for (int r = 0; r < n; ++r) {
        const RankResult& x = runs[std::size_t(r)];
        const std::size_t p = static_cast<std::size_t>(x.params);
        const std::size_t o = static_cast<std::size_t>(x.owned);
        const std::size_t grads = at(x, MemCategory::kGradients);
        const std::size_t states = at(x, MemCategory::kParameters) + grads +
                                   at(x, MemCategory::kMasterParams) +
                                   at(x, MemCategory::kOptimizerState);
        t.add({fmt("%s N=%d", run_name(stage), n), std::to_string(r),
               std::to_string(x.params), std::to_string(x.owned),
               format_bytes(at(x, MemCategory::kParameters)), format_bytes(grads),
               format_bytes(at(x, MemCategory::kMasterParams)),
               format_bytes(at(x, MemCategory::kOptimizerState)), format_bytes(states)});
        // (2 + 2 + 12/N) P, plus the FP32 gradient copy: 4 o with o the owned elements;
        // ZeRO-2: 2 P'/N of 16-bit gradients instead of 2 P.
        const std::size_t shard16 = 2 * static_cast<std::size_t>(x.padded) / std::size_t(n);
        const std::size_t grads16 = stage >= 2 ? shard16 : 2 * p;
        const std::size_t params16 = stage == 3 ? shard16 : 2 * p;
        ok = ok && at(x, MemCategory::kParameters) == params16 && grads == grads16 + 4 * o &&
             at(x, MemCategory::kMasterParams) == 4 * o &&
             at(x, MemCategory::kOptimizerState) == 8 * o;
        owned_sum += x.owned;
      }
      if (stage == 3) {
        checks.add({yes_claim(fmt("ZeRO-3, N=%d: every rank holds 2P'/N + 2P'/N + 4o + 12o "
                                  "bytes between steps: 16P/N + padding + the FP32 copy",
                                  n),
                              ok && owned_sum == runs[0].params)});
      } else if (stage == 1) {
        checks.add({yes_claim(fmt("ZeRO-1, N=%d: every rank holds 2P + 2P + 4o + 12o bytes, "
                                  "o its shard; the shards sum to P", n),
                              ok && owned_sum == runs[0].params)});
      } else if (stage == 2) {
        checks.add({yes_claim(fmt("ZeRO-2, N=%d: every rank holds 2P + 2P'/N + 4o + 12o bytes",
                                  n),
                              ok && owned_sum == runs[0].params)});
      } else {
        checks.add({yes_claim(fmt("DDP, N=%d: every rank holds 2P + (2+4)P + 12P bytes", n),
                              ok)});
      }
    }
  }
  std::printf("%s", t.str().c_str());
}

void print_traffic(ClaimTable& checks) {
  std::printf(
      "\n== 3. Bytes each rank sends per step (fp32 run): DDP's all-reduce 2(N-1)/N x 4P,\n"
      "   ZeRO-1's and ZeRO-2's reduce-scatter + all-gather (N-1)/N x 4P' each, P' = P padded\n"
      "   per bucket to a multiple of N (3 ranks: padding; DDP's ring is then within two\n"
      "   elements of its formula, communicator.h). With bf16 parameters the all-gather moves\n"
      "   2 bytes a parameter, the gradients still 4 (chapter 4's FP32 reduction): 6P(N-1)/N.\n"
      "   ZeRO-3 gathers the parameters before each unit's forward and backward instead of\n"
      "   after the step: (N-1)/N x 4 (P' + 2P' + W'), W' the wte-and-wpe unit, which the\n"
      "   embedding and the head both read in forward (the paper's 3P, plus the tie).\n");
  TextTable t({"run", "P", "P'", "rank 0 sends", "formula", "ratio"});
  for (int n : {2, 3, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      LessonSetup s;
      s.ranks = n;
      s.zero_stage = stage;
      s.dtype = DType::kF32;
      s.steps = 2;
      const RankResult x = run_lesson(s)[0];
      const double p = static_cast<double>(stage ? x.padded : x.params);
      const double w = static_cast<double>(x.wte_padded);
      const double formula = stage == 3 ? (n - 1.0) / n * 4.0 * (3.0 * p + w)
                                        : 2.0 * (n - 1) / n * 4.0 * p;
      // Sent between the step's first forward and the end of the sync, and by the all-gather:
      // the loss, found-inf and norm reductions come on top (a few 8-byte messages).
      const double measured = static_cast<double>(x.sent_per_step);
      t.add({fmt("%s N=%d", run_name(stage), n), std::to_string(x.params),
             std::to_string(x.padded), fmt("%.0f B", measured), fmt("%.0f B", formula),
             fmt("%.4f", measured / formula)});
      if (stage == 3) {
        checks.add({{fmt("ZeRO-3 N=%d sends (N-1)/N x 4(3P' + W') bytes per step", n),
                     fmt("%.0f", formula), fmt("%.0f", measured), measured == formula}});
      } else if (stage >= 1) {
        checks.add({{fmt("%s N=%d sends 2(N-1)/N x 4P' bytes per step", run_name(stage), n),
                     fmt("%.0f", formula), fmt("%.0f", measured), measured == formula}});
      }
    }
  }
  std::printf("%s", t.str().c_str());
}

void print_bitwise(ClaimTable& checks) {
  std::printf(
      "\n== 4. ZeRO-1, 2 and 3 against DDP on the same ranks, 6 steps, clipping active (max\n"
      "   norm 0.05): the same loss, norm, coefficient and weights hash at every step\n");
  TextTable t({"dtype", "N", "steps clipped", "last loss (DDP)", "last loss (ZeRO-1)",
               "last loss (ZeRO-2)", "last loss (ZeRO-3)", "steps equal (1, 2, 3)"});
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int n : {2, 4}) {
      LessonSetup s;
      s.ranks = n;
      s.dtype = d;
      s.zero_stage = 0;
      const RankResult a = run_lesson(s)[0];
      s.zero_stage = 1;
      const RankResult b = run_lesson(s)[0];
      s.zero_stage = 2;
      const RankResult c = run_lesson(s)[0];
      s.zero_stage = 3;
      const RankResult d3 = run_lesson(s)[0];
      auto same = [](const StepRecord& x, const StepRecord& y) {
        return x.loss == y.loss && x.weights_hash == y.weights_hash && x.skipped == y.skipped &&
               (x.skipped || (x.grad_norm == y.grad_norm && x.clip_coef == y.clip_coef));
      };
      int equal1 = 0, equal2 = 0, equal3 = 0, clipped = 0;
      for (std::size_t k = 0; k < a.steps.size(); ++k) {
        equal1 += same(a.steps[k], b.steps[k]);
        equal2 += same(a.steps[k], c.steps[k]);
        equal3 += same(a.steps[k], d3.steps[k]);
        clipped += a.steps[k].clip_coef < 1.0;
      }
      t.add({std::string(dtype_name(d)), std::to_string(n), std::to_string(clipped),
             fmt("%.9f", a.steps.back().loss), fmt("%.9f", b.steps.back().loss),
             fmt("%.9f", c.steps.back().loss), fmt("%.9f", d3.steps.back().loss),
             fmt("%d, %d, %d / %zu", equal1, equal2, equal3, a.steps.size())});
      const int steps = static_cast<int>(a.steps.size());
      checks.add({yes_claim(fmt("%s N=%d: ZeRO-1, 2 and 3 == DDP bit for bit, every step, "
                                "clipped",
                                std::string(dtype_name(d)).c_str(), n),
                            equal1 == steps && equal2 == steps && equal3 == steps &&
                                clipped > 0)});
    }
  }
  std::printf("%s", t.str().c_str());
}

// The claim the correct ZeRO run passes, measured on the buggy one (--bug NAME: expected to
// FAIL). local-norm trains on, so the claim is section 4's: DDP's weights bit for bit. The
// others stop with an error, so it is the one every run before it passes: every rank trains
// every step.
Claim zero_correctness_claim(ZeroBug bug, int stage, const std::vector<RankResult>& ddp,
                             const std::vector<RankResult>& z) {
  const std::string name(bug_name(bug));
  const std::size_t steps = ddp[0].steps.size();
  if (bug == ZeroBug::kLocalNorm) {
    std::size_t same = 0;
    for (std::size_t k = 0; k < steps && k < z[0].steps.size(); ++k) {
      same += z[0].steps[k].weights_hash == ddp[0].steps[k].weights_hash ? 1 : 0;
    }
    return claim_broken_by(name, {fmt("%s run: ZeRO-%d == DDP bit for bit at every step",
                                      name.c_str(), stage),
                                  fmt("%zu of %zu steps", steps, steps),
                                  fmt("%zu of %zu steps", same, steps), same == steps});
  }
  std::size_t trained = steps;
  bool failed = false;
  for (const RankResult& r : z) {
    trained = std::min(trained, r.steps.size());
    failed = failed || !r.error.empty();
  }
  return claim_broken_by(
      name, {fmt("%s run: ZeRO-%d trains every step on every rank", name.c_str(), stage),
             fmt("%zu of %zu steps", steps, steps),
             fmt("%zu of %zu steps%s", trained, steps, failed ? ", then an error" : ""),
             trained == steps && !failed});
}

void print_bug(ZeroBug bug, int n, ClaimTable& checks) {
  LessonSetup s;
  s.ranks = n;
  s.zero_stage = 0;
  const std::vector<RankResult> ddp = run_lesson(s);
  s.zero_stage = bug == ZeroBug::kReleasedGradients ? 2 : 1;
  if (bug == ZeroBug::kForgottenTiedWeight || bug == ZeroBug::kPrefetchOrder) s.zero_stage = 3;
  s.bug = bug;
  // An overflow is what a loss scaler checks for: fp16.
  if (bug == ZeroBug::kUnsharedOverflow) s.dtype = DType::kF16;
  const std::vector<RankResult> z = run_lesson(s);
  if (bug == ZeroBug::kLocalNorm) {
    std::printf(
        "\n== Failure: clipping each shard by its own norm (N=%d). Each rank's coefficient is\n"
        "   max_norm / its shard's norm: they differ, and the gathered model parts from DDP's\n",
        n);
    TextTable t({"step", "DDP coef", "rank 0 coef", "rank 1 coef", "hash == DDP's"});
    int parted = -1;
    bool differ = false;
    for (std::size_t k = 0; k < ddp[0].steps.size(); ++k) {
      const bool same = z[0].steps[k].weights_hash == ddp[0].steps[k].weights_hash;
      if (!same && parted < 0) parted = static_cast<int>(k) + 1;
      differ = differ || z[0].steps[k].clip_coef != z[1].steps[k].clip_coef;
      t.add({std::to_string(k + 1), fmt("%.6f", ddp[0].steps[k].clip_coef),
             fmt("%.6f", z[0].steps[k].clip_coef), fmt("%.6f", z[1].steps[k].clip_coef),
             same ? "yes" : "no"});
    }
    std::printf("%s   the replica hash parts from DDP's at step %d\n", t.str().c_str(), parted);
    checks.add({yes_claim("local-norm: the ranks' coefficients differ and the hash parts from "
                          "DDP's at step 1",
                          differ && parted == 1)});
  } else if (bug == ZeroBug::kUnsharedOverflow) {
    std::printf(
        "\n== Failure: an overflow in rank %d's shard, the found-inf vote left out (N=%d): that\n"
        "   rank skips (no norm, no step, no all-gather) while the others go on: they wait for\n"
        "   it in the norm's chain or the all-gather, and the communicator names the calls\n",
        n - 1, n);
    const std::string& e = z[0].error;
    std::printf("   every rank fails with: %s\n", e.empty() ? "(nothing)" : e.c_str());
    checks.add({yes_claim("unshared-overflow: the next collective disagrees and every rank "
                          "fails with a CommError instead of training on",
                          !e.empty())});
  } else if (bug == ZeroBug::kReleasedGradients) {
    std::printf(
        "\n== Failure: ZeRO-2 with the optimizer built on the registry's full gradients (N=%d)\n"
        "   instead of this rank's shard: the full buffer is released once its last bucket is\n"
        "   reduce-scattered, and the optimizer's first read of it is named\n",
        n);
    const std::string& e = z[0].error;
    std::printf("   the step fails with: %s\n", e.empty() ? "(nothing)" : e.c_str());
    checks.add({yes_claim("released-gradients: the optimizer's read of the released full "
                          "gradients is a named error, not stale values",
                          e.find("released by ZeRO-2") != std::string::npos)});
  } else if (bug == ZeroBug::kForgottenTiedWeight) {
    std::printf(
        "\n== Failure: ZeRO-3 with the head's unit gathering ln_f but not the tied wte (N=%d):\n"
        "   the head's matmul reads wte, released after the embedding's forward, and the read\n"
        "   is named instead of computing with whatever the freed bytes hold\n",
        n);
    const std::string& e = z[0].error;
    std::printf("   the forward fails with: %s\n", e.empty() ? "(nothing)" : e.c_str());
    checks.add({yes_claim("forgotten-tied-weight: the head's read of the released wte is a "
                          "named error",
                          e.find("tensor used while released: the parameters of the bucket "
                                 "starting at wte.weight") != std::string::npos)});
  } else if (bug == ZeroBug::kPrefetchOrder) {
    std::printf(
        "\n== Failure: ZeRO-3 prefetching the backward as head, block 0, block 1 (N=%d) while\n"
        "   the model runs head, block 1, block 0: the gather of block 0 already in flight\n"
        "   comes back on every rank, then every rank names the expected and the actual unit\n",
        n);
    const std::string& e = z[0].error;
    std::printf("   the backward fails with: %s\n", e.empty() ? "(nothing)" : e.c_str());
    checks.add({yes_claim("prefetch-order: an error naming the expected (block 0) and the "
                          "actual (block 1) unit, not a hang",
                          e.find("asked for block 1") != std::string::npos &&
                              e.find("expected block 0") != std::string::npos)});
  }
  checks.add({zero_correctness_claim(bug, s.zero_stage, ddp, z)});
}

int run(int argc, char** argv) {
  const ZeroDemoFlags flags = parse_zero_demo_flags(argc, argv);
  const std::string& bug = flags.bug;
  const int n = flags.ranks;
  std::printf("== ch05: ZeRO stages 1, 2 and 3 (local backend, ranks as threads)\n");
  ClaimTable checks(bug);
  if (bug == "all" || bug == "none") {
    print_paper_column(checks);
    print_measured_bill(checks);
    print_traffic(checks);
    print_bitwise(checks);
  }
  if (bug != "none") {
    for (ZeroBug b : {ZeroBug::kLocalNorm, ZeroBug::kUnsharedOverflow,
                      ZeroBug::kReleasedGradients, ZeroBug::kForgottenTiedWeight,
                      ZeroBug::kPrefetchOrder}) {
      if (bug == "all" || bug == bug_name(b)) print_bug(b, n, checks);
    }
  }
  return checks.print() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
