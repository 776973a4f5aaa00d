// test_ch04_mpi's main: one process per rank under mpirun. MPI is initialised around the whole
// gtest run; every rank runs every test (the tests are collective), and only rank 0 prints the
// usual report. Other ranks print their failed assertions, prefixed with their rank, so a
// failure seen by rank 3 alone is not lost; any rank's failure makes the job exit non-zero.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_backend.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  mixpar::MpiSession mpi(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int local = RUN_ALL_TESTS();
  // Every rank learns whether any rank failed, so the exit codes agree.
  int any = local;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
