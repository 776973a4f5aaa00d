// The error text of the CUDA checks: one line with everything needed to find the failing call.
#include "cuda/check.h"

namespace mixpar::cuda {

std::string format_error(const char* library, const char* call, const char* message, int code,
                         const char* file, int line) {
  return std::string(call) + " failed: " + (message ? message : "unknown error") + " (" +
         library + " " + std::to_string(code) + ") at " + file + ":" + std::to_string(line);
}

void throw_error(const char* library, const char* call, const char* message, int code,
                 const char* file, int line) {
  throw CudaError(format_error(library, call, message, code, file, line), code);
}

}  // namespace mixpar::cuda
