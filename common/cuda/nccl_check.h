// MIXPAR_NCCL_CHECK: NCCL calls checked like the CUDA ones (cuda/check.h), throwing CudaError
// with NCCL's message. Only for builds with NCCL (MIXPAR_HAVE_NCCL), which link libnccl.
#pragma once

#include <nccl.h>

#include "cuda/check.h"

namespace mixpar::cuda {

inline void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result != ncclSuccess) {
    throw_error("nccl", call, ncclGetErrorString(result), static_cast<int>(result), file, line);
  }
}

}  // namespace mixpar::cuda

#define MIXPAR_NCCL_CHECK(call) ::mixpar::cuda::check_nccl((call), #call, __FILE__, __LINE__)
