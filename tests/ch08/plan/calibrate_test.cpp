// mixpar-plan --calibrate's fit (calibrate.h): least squares recovers a line exactly, and a
// short calibration of 2 rank threads gives a valid cluster with positive rates.
#include "calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace mixpar::plan {
namespace {

TEST(PlanCalibrate, LeastSquaresRecoversALine) {
  const auto [a, b] = fit_line({{1, 5}, {2, 7}, {4, 11}, {8, 19}});
  EXPECT_NEAR(a, 3.0, 1e-12);
  EXPECT_NEAR(b, 2.0, 1e-12);
}

TEST(PlanCalibrate, RelativeLeastSquaresKeepsTheSmallSizesRelativeErrorsSmaller) {
  // t = 10 + x, the largest size 5% slow (a cache effect): the plain fit lets the small sizes
  // absorb it, the relative one keeps every point's relative error lower at its worst.
  const std::vector<std::pair<double, double>> pts = {
      {1, 11}, {10, 20}, {100, 110}, {1e4, 1e4 * 1.05 + 10}};
  const auto worst = [&](std::pair<double, double> ab) {
    double w = 0;
    for (const auto& [x, y] : pts) w = std::max(w, std::fabs(ab.first + ab.second * x - y) / y);
    return w;
  };
  EXPECT_LT(worst(fit_line(pts, true)), worst(fit_line(pts, false)));
}

TEST(PlanCalibrate, ThisMachineIsAValidSharedCluster) {
  Calibration cal = calibrate_this_machine(2, 1, {32, 64}, {4e3, 64e3});
  cal.cluster.memory_bytes = 1e9;  // the tool sets it from MemAvailable
  EXPECT_NO_THROW(validate(cal.cluster));
  EXPECT_EQ(cal.cluster.shared_cores, 1);
  EXPECT_GT(cal.cluster.peak_flops, 0);
  EXPECT_EQ(cal.gemm.size(), 2u);
  EXPECT_EQ(cal.collective.size(), 2u);
}

}  // namespace
}  // namespace mixpar::plan
