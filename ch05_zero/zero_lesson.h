// The chapter's lesson: a small GPT trained by N local ranks with chapter 4's DDP and with ZeRO
// stages 1, 2 and 3, step by step, and what each rank's ledger and communicator measured, plus the
// failure modes switched on by name. The loop is the trainer's (chapter 3's optimizer, the
// seams of common/parallel) written out so the lesson can break one piece at a time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/gpt_params.h"
#include "numerics/dtype.h"
#include "tensor/ledger.h"

namespace mixpar::ch05 {

enum class ZeroBug : std::uint8_t {
  kNone,
  // Each rank clips its shard by the norm of its shard alone: the coefficients differ between
  // ranks, and the gathered model is no longer DDP's (its hash parts from DDP's).
  kLocalNorm,
  // The found-inf vote left out: an overflow in one rank's shard skips that rank's step only;
  // the others measure the norm and step, waiting in collectives that rank never joins (the
  // local backend reports the deadlock, naming every rank's call).
  kUnsharedOverflow,
  // ZeRO-2 with the optimizer built on the registry's gradients (stage 1's views) instead of
  // this rank's gradient shard: the full buffer is released after the reduce-scatter, and the
  // optimizer's first read of it is a named error (not stale or foreign values).
  kReleasedGradients,
  // ZeRO-3 with the head's unit gathering ln_f but not the tied wte (a shared parameter left
  // out of a unit, DeepSpeed's "external parameter"): the head's matmul reads the released
  // wte, a named error instead of garbage.
  kForgottenTiedWeight,
  // ZeRO-3 prefetching the backward in an order other than the one the model runs (head, then
  // block 0 first): the second unit asked for is not the one prefetched; the gathers in flight
  // come back, then an error naming the expected and the actual unit, on every rank, no hang.
  kPrefetchOrder,
};
// "none" | "local-norm" | "unshared-overflow" | "released-gradients" | "forgotten-tied-weight"
// | "prefetch-order"
std::string_view bug_name(ZeroBug b);
ZeroBug parse_bug(std::string_view text);  // InputError listing the choices

struct LessonSetup {
  int ranks = 2;
  int zero_stage = 1;  // 0: DDP; 1, 2 or 3
  int prefetch = 1;    // ZeRO-3's units gathered ahead
  DType dtype = DType::kBF16;
  int steps = 6;
  GptConfig model{2, 2, 32, 16, 256};
  std::int64_t batch = 2, seq = 16;
  double max_grad_norm = 0.05;  // below the model's norms: clipping is active
  std::size_t bucket_cap_bytes = 8192;
  ZeroBug bug = ZeroBug::kNone;
};

struct StepRecord {
  double loss = 0, grad_norm = 0, clip_coef = 1;
  bool skipped = false;
  std::uint64_t weights_hash = 0;  // of the working copy after the step
};

struct RankResult {
  std::vector<StepRecord> steps;
  std::array<std::size_t, kNumMemCategories> mem{};  // live bytes by category after the run
  std::size_t sent_per_step = 0;    // gradient + parameter collectives, bytes sent per step
  std::int64_t wte_padded = 0;      // ZeRO-3: the padded elements of the wte-and-wpe unit
  std::int64_t params = 0, padded = 0, owned = 0;  // P, the padded buckets, this rank's shard
  std::string error;  // a rank that failed (the unshared-overflow mode): its message
};

// Every rank's result, by rank.
std::vector<RankResult> run_lesson(const LessonSetup& s);

}  // namespace mixpar::ch05
