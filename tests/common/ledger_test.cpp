// The memory ledger: what a tensor allocation charges (category, device, exact bytes), live
// and peak bookkeeping (peak_total is the peak of the sum), reset_peaks, per-thread routing
// with LedgerScope, and frees credited to the charged ledger whichever thread frees.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tensor/device_api.h"
#include "tensor/ledger.h"
#include "tensor/tensor.h"

namespace mixpar {
namespace {

using MC = MemCategory;

TEST(Ledger, AllocationChargesItsCategoryAndFreesOnDestruction) {
  MemoryLedger ledger(3);
  LedgerScope scope(ledger);
  {
    Tensor p = Tensor::empty({4, 8}, DType::kBF16, MC::kParameters);
    Tensor m = Tensor::zeros({4, 8}, DType::kF32, MC::kMasterParams);
    EXPECT_EQ(ledger.live(MC::kParameters), 4u * 8 * 2);
    EXPECT_EQ(ledger.live(MC::kMasterParams), 4u * 8 * 4);
    EXPECT_EQ(ledger.live(MC::kGradients), 0u);
    EXPECT_EQ(ledger.live_total(), 4u * 8 * 6);
    EXPECT_EQ(ledger.allocations(), 2);
    EXPECT_EQ(ledger.live_total(Device::kCUDA), 0u);
  }
  for (MemCategory c : kAllMemCategories) EXPECT_EQ(ledger.live(c), 0u) << category_name(c);
  EXPECT_EQ(ledger.live_total(), 0u);
  EXPECT_EQ(ledger.peak(MC::kParameters), 64u);  // peaks outlive the tensors
  EXPECT_EQ(ledger.rank(), 3);
}

// The ledger charges what the tensor holds, not the 64-byte-rounded allocation: the chapters
// compare it with formulas in elements x bytes per element.
TEST(Ledger, ChargesExactElementBytesNotTheAlignedAllocation) {
  MemoryLedger ledger;
  Tensor t = Tensor::empty({3}, DType::kF16, MC::kActivations, Device::kCPU, &ledger);
  EXPECT_EQ(ledger.live(MC::kActivations), 6u);
}

TEST(Ledger, PeakTotalIsThePeakOfTheSumNotTheSumOfPeaks) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  { Tensor a = Tensor::empty({100}, DType::kF32, MC::kActivations); }  // 400 B, freed
  { Tensor g = Tensor::empty({50}, DType::kF32, MC::kGradients); }     // 200 B, freed
  EXPECT_EQ(ledger.peak(MC::kActivations), 400u);
  EXPECT_EQ(ledger.peak(MC::kGradients), 200u);
  EXPECT_EQ(ledger.peak_total(), 400u);  // never both alive at once
  Tensor a = Tensor::empty({100}, DType::kF32, MC::kActivations);
  Tensor g = Tensor::empty({50}, DType::kF32, MC::kGradients);
  EXPECT_EQ(ledger.peak_total(), 600u);
}

TEST(Ledger, ResetPeaksRestartsFromLiveBytes) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor keep = Tensor::empty({10}, DType::kF32, MC::kOptimizerState);
  { Tensor tmp = Tensor::empty({1000}, DType::kF32, MC::kOptimizerState); }
  EXPECT_EQ(ledger.peak(MC::kOptimizerState), 4040u);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak(MC::kOptimizerState), 40u);
  EXPECT_EQ(ledger.peak_total(), 40u);
  EXPECT_EQ(ledger.live(MC::kOptimizerState), 40u);
}

TEST(Ledger, DevicesHaveSeparateColumns) {
  MemoryLedger ledger;
  ledger.on_alloc(MC::kCommBuffers, Device::kCUDA, 1000);
  EXPECT_EQ(ledger.live(MC::kCommBuffers, Device::kCUDA), 1000u);
  EXPECT_EQ(ledger.live(MC::kCommBuffers, Device::kCPU), 0u);
  EXPECT_EQ(ledger.allocations(Device::kCUDA), 1);
  EXPECT_EQ(ledger.allocations(Device::kCPU), 0);
  ledger.on_free(MC::kCommBuffers, Device::kCUDA, 1000);
  EXPECT_EQ(ledger.peak_total(Device::kCUDA), 1000u);
}

TEST(Ledger, FreeingMoreThanLiveIsALogicError) {
  MemoryLedger ledger;
  ledger.on_alloc(MC::kOther, Device::kCPU, 10);
  EXPECT_THROW(ledger.on_free(MC::kOther, Device::kCPU, 11), std::logic_error);
  EXPECT_THROW(ledger.on_free(MC::kParameters, Device::kCPU, 1), std::logic_error);
  EXPECT_EQ(ledger.live(MC::kOther), 10u);  // a rejected free changes nothing
}

TEST(Ledger, ExplicitLedgerArgumentOverridesTheCurrentOne) {
  MemoryLedger current, other;
  LedgerScope scope(current);
  Tensor t = Tensor::empty({8}, DType::kF32, MC::kOther, Device::kCPU, &other);
  EXPECT_EQ(other.live(MC::kOther), 32u);
  EXPECT_EQ(current.live(MC::kOther), 0u);
}

TEST(Ledger, ScopesNestAndRestoreThePreviousLedger) {
  MemoryLedger outer, inner;
  EXPECT_EQ(&current_ledger(), &default_ledger());
  {
    LedgerScope a(outer);
    EXPECT_EQ(&current_ledger(), &outer);
    {
      LedgerScope b(inner);
      EXPECT_EQ(&current_ledger(), &inner);
    }
    EXPECT_EQ(&current_ledger(), &outer);
  }
  EXPECT_EQ(&current_ledger(), &default_ledger());
}

// Each simulated rank is a thread with its own ledger: a scope on one thread leaves every
// other thread's allocations where they were.
TEST(Ledger, ScopeRoutesOnlyItsOwnThreadsAllocations) {
  MemoryLedger rank0(0), rank1(1);
  LedgerScope main_scope(rank0);
  std::thread worker([&] {
    LedgerScope scope(rank1);
    Tensor t = Tensor::empty({16}, DType::kF32, MC::kParameters);
    EXPECT_EQ(rank1.live(MC::kParameters), 64u);
  });
  Tensor mine = Tensor::empty({4}, DType::kF32, MC::kParameters);
  worker.join();
  EXPECT_EQ(rank0.live(MC::kParameters), 16u);
  EXPECT_EQ(rank0.allocations(), 1);
  EXPECT_EQ(rank1.live(MC::kParameters), 0u);
  EXPECT_EQ(rank1.peak(MC::kParameters), 64u);
}

TEST(Ledger, TensorFreedOnAnotherThreadIsCreditedToTheLedgerItWasChargedTo) {
  MemoryLedger rank1(1), here(0);
  Tensor t;
  std::thread worker([&] {
    LedgerScope scope(rank1);
    t = Tensor::empty({32}, DType::kF16, MC::kCommBuffers);
  });
  worker.join();
  EXPECT_EQ(rank1.live(MC::kCommBuffers), 64u);
  {
    LedgerScope scope(here);
    t = Tensor();  // the last handle dies on this thread
  }
  EXPECT_EQ(rank1.live(MC::kCommBuffers), 0u);
  EXPECT_EQ(here.live(MC::kCommBuffers), 0u);
  EXPECT_EQ(here.allocations(), 0);
}

TEST(Ledger, ConcurrentAllocationsAddUpExactly) {
  MemoryLedger ledger;
  const int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      LedgerScope scope(ledger);
      std::vector<Tensor> held;
      for (int j = 0; j < kEach; ++j) held.push_back(Tensor::empty({j + 1}, DType::kF32, MC::kActivations));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ledger.allocations(), kThreads * kEach);
  EXPECT_EQ(ledger.live_total(), 0u);
  EXPECT_LE(ledger.peak_total(), static_cast<std::size_t>(kThreads) * 4 * kEach * (kEach + 1) / 2);
  EXPECT_GE(ledger.peak_total(), static_cast<std::size_t>(4) * kEach * (kEach + 1) / 2);
}

TEST(Ledger, TableListsEveryCategoryTheTotalAndTheRank) {
  MemoryLedger ledger(5);
  ledger.on_alloc(MC::kOptimizerState, Device::kCPU, 3u << 20);
  const std::string table = ledger.table();
  for (MemCategory c : kAllMemCategories) {
    EXPECT_NE(table.find(std::string(category_name(c))), std::string::npos) << category_name(c) << "\n" << table;
  }
  EXPECT_NE(table.find("total"), std::string::npos) << table;
  EXPECT_NE(table.find("rank 5"), std::string::npos) << table;
  EXPECT_NE(table.find("cpu"), std::string::npos) << table;
  EXPECT_NE(table.find("3.00 MiB"), std::string::npos) << table;
  EXPECT_NE(ledger.table(Device::kCUDA).find("cuda"), std::string::npos);
  ledger.on_free(MC::kOptimizerState, Device::kCPU, 3u << 20);
}

// Optimizer offload: what is allocated inside a HostMemoryScope is billed to the host side,
// apart from the device's columns, and freed there; scopes nest and end with their thread's
// allocations routed back to the device side.
TEST(Ledger, HostMemoryScopeBillsTheHostSideApartFromTheDevice) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor p = Tensor::empty({16}, DType::kBF16, MC::kParameters);
  {
    const HostMemoryScope host;
    Tensor m = Tensor::zeros({16}, DType::kF32, MC::kMasterParams);
    EXPECT_EQ(m.place(), MemPlace::kHost);
    EXPECT_TRUE(m.is_cpu());
    {
      const HostMemoryScope nested;
      Tensor v = Tensor::empty({8}, DType::kF32, MC::kOptimizerState);
      EXPECT_EQ(ledger.host_live(MC::kOptimizerState), 32u);
    }
    EXPECT_EQ(ledger.host_live(MC::kMasterParams), 64u);
    EXPECT_EQ(ledger.host_live_total(), 64u);
    EXPECT_EQ(ledger.host_peak_total(), 96u);
    EXPECT_EQ(ledger.host_allocations(), 2);
    EXPECT_EQ(ledger.live(MC::kMasterParams), 0u);  // not on the device's side
    EXPECT_EQ(ledger.live_total(), 32u);            // the device holds the parameters only
    Tensor copy = m.clone();                        // made inside the scope: the host's too
    EXPECT_EQ(copy.place(), MemPlace::kHost);
  }
  EXPECT_EQ(ledger.host_live_total(), 0u);
  EXPECT_EQ(current_mem_place(), MemPlace::kDevice);
  Tensor after = Tensor::empty({4}, DType::kF32, MC::kMasterParams);
  EXPECT_EQ(after.place(), MemPlace::kDevice);
  EXPECT_EQ(ledger.live(MC::kMasterParams), 16u);
  EXPECT_EQ(p.place(), MemPlace::kDevice);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.host_peak_total(), 0u);
  EXPECT_EQ(place_name(MemPlace::kHost), "host");
  EXPECT_EQ(place_name(MemPlace::kDevice), "device");
}

// A released and restored storage comes back on the side it was billed to, scope or not.
TEST(Ledger, ARestoredHostStorageIsBilledToTheHostAgain) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor m;
  {
    const HostMemoryScope host;
    m = Tensor::zeros({10}, DType::kF32, MC::kOptimizerState);
  }
  m.release_storage("a test's moments");
  EXPECT_EQ(ledger.host_live_total(), 0u);
  m.restore_storage();
  EXPECT_EQ(ledger.host_live(MC::kOptimizerState), 40u);
  EXPECT_EQ(ledger.live_total(), 0u);
}

// Pinning needs the CUDA runtime and a device: elsewhere the allocation is a runtime_error
// saying why (GpuGptModel's offload is the only user), and nothing is charged.
TEST(Ledger, PinnedHostMemoryWithoutAGpuIsANamedError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: pinning works here";
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  const HostMemoryScope pinned(/*pinned=*/true);
  EXPECT_TRUE(current_host_pinned());
  EXPECT_THROW(Tensor::empty({4}, DType::kF32, MC::kMasterParams), std::runtime_error);
  EXPECT_EQ(ledger.host_live_total(), 0u);
}

TEST(Ledger, CategoryNamesAreDistinctAndNamed) {
  std::vector<std::string> names;
  for (MemCategory c : kAllMemCategories) names.emplace_back(category_name(c));
  EXPECT_EQ(names, (std::vector<std::string>{"parameters", "gradients", "master_params", "optimizer_state",
                                             "activations", "comm_buffers", "other"}));
}

TEST(Ledger, FormatBytesUsesBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(std::size_t{5} << 30), "5.00 GiB");
  EXPECT_EQ(format_bytes(std::size_t{2} << 50), "2048.00 TiB");  // TiB is the largest unit
}

}  // namespace
}  // namespace mixpar
