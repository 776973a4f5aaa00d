// The all-to-all buffers of mixpar-mem's MoE bill (ch03_master_weights/moe_memory.h) against
// the ledger of chapter 9's layer on two ep ranks: the communication buffer a rank holds at
// its peak over a forward and a backward is one receive buffer of the rows its experts run,
// C FP32 values each, and those rows (and the rows it sends) stay within the bill's bound:
// the capacity's with a factor, the worst case without.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ch03_master_weights/moe_memory.h"
#include "ch09_expert_parallel/moe_layer.h"
#include "random/philox.h"
#include "ranks.h"
#include "tensor/ledger.h"

namespace mixpar {
namespace {

struct Measured {
  std::int64_t comm_peak = 0, rows_sent = 0, rows_run = 0;
};

TEST(MoeDispatchBill, TheReceiveBufferIsTheLedgersPeakAndTheRowsStayWithinTheBill) {
  constexpr std::int64_t T = 24, C = 16;
  for (const double factor : {0.0, 1.0}) {
    SCOPED_TRACE("capacity factor " + std::to_string(factor));
    ch09::MoeConfig m;
    m.d_model = C;
    m.d_hidden = 4 * C;
    m.n_experts = 4;
    m.top_k = 2;
    m.capacity_factor = factor;
    const std::vector<Measured> runs =
        test_support::on_each_rank(2, [&](Communicator* world, int rank) {
          ch09::MoeLayer layer(m, ch09::MoeParallel{world, world});
          Tensor x = Tensor::empty({T, C}, DType::kF32, MemCategory::kActivations);
          Tensor dy = Tensor::empty({T, C}, DType::kF32, MemCategory::kOther);
          Philox g(11, static_cast<std::uint64_t>(rank));
          fill_normal(x, g);
          fill_normal(dy, g);
          current_ledger().reset_peaks();
          (void)layer.forward(x);
          (void)layer.backward(dy);
          const ch09::MoeStats& s = layer.stats();
          return Measured{
              static_cast<std::int64_t>(current_ledger().peak(MemCategory::kCommBuffers)),
              s.assignments - s.dropped, s.expert_rows};
        });
    mem::GptShape shape{1, C, 1, 16, T, 1, T};
    mem::Layout layout;
    layout.dp = 2;
    const mem::MoeShape moe{m.n_experts, m.top_k, 1, 2, factor};
    const mem::MoeBill bill =
        mem::moe_bill(shape, moe, 1, 1, mem::Precision::kFp32, mem::Optimizer::kAdamW, layout);
    EXPECT_EQ(bill.dispatch_receive, 4 * C * bill.rows_run);
    EXPECT_EQ(bill.dispatch_send, 4 * C * bill.rows_sent);
    std::int64_t run_somewhere = 0;
    for (std::size_t r = 0; r < runs.size(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(runs[r].comm_peak, 4 * C * runs[r].rows_run);
      EXPECT_LE(runs[r].rows_run, bill.rows_run);
      EXPECT_LE(runs[r].rows_sent, bill.rows_sent);
      run_somewhere += runs[r].rows_run;
    }
    EXPECT_GT(run_somewhere, 0);
  }
}

}  // namespace
}  // namespace mixpar
