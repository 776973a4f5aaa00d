// Exercise (chapter 5): the model-state bytes one data-parallel rank holds under ZeRO stage
// 0-3, mixed-precision AdamW (Rajbhandari et al. 2020, Figure 1: 2 + 2 + K bytes per parameter,
// K = 12). Per parameter: 2 bytes of 16-bit working weight, 2 of 16-bit gradient, 4 of FP32
// master weight and 8 of AdamW's FP32 m and v.
//   - stage 0 (plain data parallelism): every rank holds all four for every parameter;
//   - stage 1 shards the optimizer states, which in mixed precision include the FP32 masters;
//   - stage 2 shards the gradients as well; stage 3 the working weights as well.
// A sharded state holds ceil(n / dp) parameters' worth on each rank (the flat buffer is padded
// so that every rank's shard has the same size; chapter 5's partition pads further, to
// alignment, which this bill leaves out). See ch05_zero/README.md (the memory table and
// figure) and ch03_master_weights/memory_calculator.h (model_states), which the tests compare
// with.
#pragma once

#include <cstdint>

namespace mixpar::exercises {

struct ZeroBytes {
  std::int64_t parameters = 0, gradients = 0, master_params = 0, optimizer_state = 0;
  std::int64_t total() const { return parameters + gradients + master_params + optimizer_state; }
};

// One rank's bytes for a model of n parameters, ZeRO stage `stage` (0..3) over dp ranks.
ZeroBytes zero_model_states(std::int64_t n, int stage, std::int64_t dp);

}  // namespace mixpar::exercises
