// Helpers for chapter 8's tests: a tiny trainer configuration that runs in milliseconds,
// byte-exact tensor comparison, and raw file edits for building corrupt checkpoints by hand
// (the scratch directory, the file reads and writes and the InputError check are every test's:
// tests/support).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "expect.h"
#include "model/mlp.h"
#include "random/philox.h"
#include "ranks.h"
#include "temp_dir.h"
#include "tensor/tensor.h"
#include "trainer.h"
#include "trainer_config.h"
#include "training_data.h"
#include "util/errors.h"

namespace mixpar::ch08::test {

using test_support::input_error_of;
using test_support::read_bytes;
using test_support::TempDir;

// 2 layers, 2 heads, width 16, 8 positions, byte vocabulary: ~16K parameters.
inline TrainerConfig tiny_config() {
  TrainerConfig c;
  c.model = GptConfig{2, 2, 16, 8, 256};
  c.batch = 2;
  c.seq = 8;
  c.steps = 6;
  c.schedule = LrSchedule{LrScheduleKind::kCosine, 1e-2, 1e-3, 2, 6};
  c.data = "test tokens";
  c.eval_every = 0;
  return c;
}

// n pseudo-random byte tokens (seeded), as TrainingData.
inline TrainingData random_data(std::size_t n, std::uint64_t seed = 7) {
  Philox g(seed);
  std::vector<std::uint16_t> tokens(n);
  for (auto& t : tokens) t = static_cast<std::uint16_t>(g.next_u32() % 64);
  TrainingData d;
  d.description = "test tokens";
  d.fingerprint = seed;
  d.tokens = std::make_shared<const std::vector<std::uint16_t>>(std::move(tokens));
  return d;
}

// A pipeline rank's step `i` against one device's: the first step's loss bit for bit (the
// same forward arithmetic); after it the tied wte's gradient is summed in another order, so
// losses agree to 1e-6 and norms to 1e-5, relative.
inline void expect_close_step(const StepStats& got, const StepStats& ref, const std::string& at) {
  EXPECT_LE(std::abs(got.loss - ref.loss), 1e-6 * std::abs(ref.loss)) << at;
  EXPECT_LE(std::abs(got.grad_norm - ref.grad_norm), 1e-5 * ref.grad_norm) << at;
}
inline void expect_one_device_step(const StepStats& got, const StepStats& ref, std::size_t i,
                                   const std::string& at) {
  if (i == 0) {
    EXPECT_EQ(got.loss, ref.loss) << at;
  }
  expect_close_step(got, ref, at);
}

// A Trainer of c on each of its ranks, running body(trainer, rank) (test_support::on_each_rank:
// c.ranks threads of the local backend, or one device without a communicator); what each body
// returned, by rank.
template <class Body>
auto train_on_each_rank(const TrainerConfig& c, const TrainingData& data, Body&& body) {
  return test_support::on_each_rank(c.ranks, [&](Communicator* world, int rank) {
    Trainer t(c, data, world);
    return body(t, rank);
  });
}

// Raw bytes of a tensor: "bit for bit" means these compare equal.
inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<unsigned char> b(t.nbytes());
  std::memcpy(b.data(), t.data(), b.size());
  return b;
}

inline void expect_same_tensors(const std::vector<NamedTensor>& a,
                                const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(bytes_of(a[i].tensor), bytes_of(b[i].tensor)) << a[i].name << " differs";
  }
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  test_support::write_raw(path, bytes);
}

}  // namespace mixpar::ch08::test
