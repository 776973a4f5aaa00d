// The multiply-add throughput of one core's matrix or vector unit, measured by running it: the
// peak a run's MFU divides by (gemm_peak.h). A peak computed as clock x lanes x units rests on
// a clock nobody reports reliably (a virtual machine shows the nominal one, and timing a chain
// of dependent adds fails on cores that fold immediate adds: 14 GHz on a Sapphire Rapids) and
// on a count of FMA units that differs between parts of one family. A kernel that keeps the unit
// busy with independent multiply-adds and counts what retires measures all three at once, as
// roofline tools (the Empirical Roofline Toolkit, likwid-bench's peakflops) do.
//
// The kernels (x86-64): 12 independent accumulators, more than an FMA's latency (4 cycles)
// times its ports (2) so that nothing waits, each updated in a loop of 2^14 iterations:
//   AVX-512 FMA   vfmadd on 16 FP32 lanes: 32 FLOPs an instruction
//   AVX2 FMA      vfmadd on 8 FP32 lanes: 16 FLOPs
//   SSE           mulps + addps on 4 lanes (no FMA): 8 FLOPs a pair
//   AVX512-BF16   vdpbf16ps: 16 lanes x 2 bf16 products summed into FP32: 64 FLOPs
//   AMX-BF16      tdpbf16ps on four 16 x 16 FP32 accumulator tiles from 16 x 32 bf16 tiles:
//                 16 x 16 x 32 x 2 = 16,384 FLOPs an instruction
// The best of many short runs counts (a run another process preempted is slower, never faster).
#pragma once

#include <string>

namespace mixpar::ch08 {

enum class ComputeUnit { kSse, kAvx2Fma, kAvx512Fma, kAvx512Bf16, kAmxBf16 };

// "AVX-512 FMA (16 FP32 lanes)", "AMX-BF16 tiles", ...
std::string unit_name(ComputeUnit u);

// The widest FP32 multiply-add unit this CPU has (whatever the build's ISA).
ComputeUnit widest_fp32_unit();

// Whether the unit can run here: the CPU has it, and for AMX Linux granted the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM); *why_not says why not.
bool unit_usable(ComputeUnit u, std::string* why_not = nullptr);

// FLOP/s of one core of the unit (on the calling thread): the best of `repeats` runs. 0 when
// the unit is not usable here.
double measure_core_flops_per_s(ComputeUnit u, int repeats = 20);

// FLOP/s of `cores` cores together: the kernel on `cores` threads at once, their rates summed
// (cores that share a physical core, or a busy machine, show it).
double measure_flops_per_s(ComputeUnit u, int cores, int repeats = 20);

}  // namespace mixpar::ch08
