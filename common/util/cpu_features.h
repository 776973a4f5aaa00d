// What this CPU can run, and what the build needs (MIXPAR_ISA, cmake/MixparIsa.cmake).
//
// A program compiled for x86-64-v3 uses AVX2 and FMA instructions anywhere the compiler saw
// fit, so on a CPU without them it dies with SIGILL ("Illegal instruction") at some
// unpredictable point, often before main. Every program that links the CPU engine instead
// checks first, in a constructor that runs before any other static initialiser of the program
// (cpu_features.cpp is compiled without ISA flags, so the check itself runs anywhere), and
// exits 2 with one line naming the build's ISA and the missing features.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mixpar {

// Whether this CPU, and the operating system (XGETBV's enabled register state), support a
// feature, named as GCC names the -m options: "avx2", "fma", "f16c", "avx512f", "avx512bf16",
// "amx-tile", ... (cmake/MixparIsa.cmake lists them). An unknown name is false, and so is a
// name listed in the environment variable MIXPAR_PRETEND_CPU_LACKS (space-separated): the
// kernels chosen at run time (ops/fma_gemm.h, ops/convert16.h) then take what a CPU without
// it would.
bool cpu_has(std::string_view feature);

// The ISA this build was compiled for ("x86-64-v3", "native", ...) and the features it needs,
// space-separated, as CMake read them off the compiler.
std::string_view build_isa();
std::string_view build_isa_needs();

// The names in `needs` (space-separated) for which `has` is false, in order.
std::vector<std::string> missing_cpu_features(std::string_view needs,
                                              const std::function<bool(std::string_view)>& has);

// The one-line refusal for a build whose ISA needs `missing`; empty when nothing is missing.
std::string cpu_check_message(std::string_view isa, const std::vector<std::string>& missing);

}  // namespace mixpar
