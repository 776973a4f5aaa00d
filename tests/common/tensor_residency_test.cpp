// A storage's residency (Storage::release / restore, what ZeRO-2 releases the full gradients
// with): the ledger is credited and charged again, every view keeps its place, reading a
// released storage through any view is an error naming what was released, and destroying a
// released storage credits nothing twice.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "tensor/ledger.h"
#include "tensor/tensor.h"

namespace mixpar {
namespace {

using MC = MemCategory;

TEST(TensorResidency, ReleaseCreditsTheLedgerAndRestoreChargesItAgain) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  {
    Tensor g = Tensor::zeros({64}, DType::kBF16, MC::kGradients);
    Tensor view = g.flat_slice(16, 8);
    EXPECT_EQ(ledger.live(MC::kGradients), 128u);
    g.release_storage("the test's gradients");
    EXPECT_FALSE(view.resident());
    EXPECT_EQ(ledger.live(MC::kGradients), 0u);
    g.release_storage("twice");  // a no-op
    EXPECT_EQ(ledger.live(MC::kGradients), 0u);
    view.restore_storage();  // through any view: the storage is shared (uninitialised)
    EXPECT_TRUE(g.resident());
    EXPECT_EQ(ledger.live(MC::kGradients), 128u);
    view.fill(2.0f);
    EXPECT_EQ(g.to_floats()[16], 2.0f);  // the view still sits at element 16
    g.release_storage("released before destruction");
  }
  EXPECT_EQ(ledger.live(MC::kGradients), 0u);  // credited once, not twice
  EXPECT_EQ(ledger.peak(MC::kGradients), 128u);
}

TEST(TensorResidency, ReadingAReleasedStorageIsANamedError) {
  Tensor p = Tensor::zeros({8}, DType::kF32, MC::kParameters);
  Tensor view = p.view({2, 4});
  p.release_storage("block 3's parameters, not gathered");
  try {
    (void)view.to_floats();
    FAIL() << "a released storage was read";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("block 3's parameters, not gathered"),
              std::string::npos)
        << e.what();
  }
  p.restore_storage();
  EXPECT_NO_THROW(view.zero());
}

}  // namespace
}  // namespace mixpar
