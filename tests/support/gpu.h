// The GPU tests compile wherever the CUDA toolkit is and run where a device is visible; on any
// other machine each one skips, saying why (no device, or a build without CUDA).
#pragma once

#include <gtest/gtest.h>

#include "tensor/device_api.h"

// A macro, not a function: GTEST_SKIP() ends the test by returning from the test's own body.
#define SKIP_WITHOUT_GPU() \
  if (!mixpar::cuda_available()) GTEST_SKIP() << mixpar::cuda_unavailable_reason()
