# The x86-64 vector ISA the CPU engine is compiled for: MIXPAR_ISA.
#
#   x86-64-v3       (default) AVX2, FMA, F16C, BMI2: every x86-64 CPU since Haswell (2013) and
#                   Excavator/Zen (2015). An FP32 run prints the same digits on an AVX2-only
#                   AMD and an AVX-512 Intel (docs/REFERENCE.md, "Which results are
#                   bit-identical where"): the FP32 GEMMs pick their AVX-512 or AVX2 kernel
#                   at run time with the same bits (common/ops/fma_gemm.h), the rest runs the
#                   same instructions; oneDNN picks AMX or AVX512-BF16 for 16-bit GEMMs at
#                   run time where the CPU has them, and those sum in their own order.
#   native          this host's own ISA (-march=native: AVX-512 where the CPU has it), the
#                   fastest on this machine and only there: `cmake --preset native`.
#   x86-64-v4       AVX-512 F/BW/CD/DQ/VL (Skylake-SP, Zen 4 and later).
#   sapphirerapids  x86-64-v4 plus AVX512-BF16, AVX512-FP16 and AMX.
#   x86-64          no ISA flag: SSE2, what any x86-64 CPU runs.
# Any other -march value GCC or clang takes works too. The choice is made once, here, and
# never follows the building machine unless asked for (native): a build's warnings, and
# whether it succeeds, are the same on every host.
#
# The features the chosen ISA needs are read off the compiler's own predefined macros and
# checked when any program of the build starts (common/util/cpu_features.cpp): a binary built
# for an ISA this CPU lacks says which features are missing and exits 2, instead of dying on
# an illegal instruction.
set(MIXPAR_ISA "x86-64-v3" CACHE STRING
    "x86-64 ISA of the CPU engine: x86-64-v3 (default), native, x86-64-v4, sapphirerapids, x86-64, or any -march value")
set_property(CACHE MIXPAR_ISA PROPERTY STRINGS x86-64-v3 native x86-64-v4 sapphirerapids x86-64)

set(MIXPAR_ISA_FLAGS "")
set(MIXPAR_ISA_NEEDS "")
if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  message(STATUS "ISA: the compiler's default (${CMAKE_SYSTEM_PROCESSOR}; MIXPAR_ISA applies to x86-64)")
  return()
endif()
if(NOT MIXPAR_ISA STREQUAL "x86-64")
  set(MIXPAR_ISA_FLAGS "-march=${MIXPAR_ISA}")
  include(CheckCXXCompilerFlag)
  string(MAKE_C_IDENTIFIER "MIXPAR_HAS_MARCH_${MIXPAR_ISA}" _mixpar_isa_var)
  check_cxx_compiler_flag(${MIXPAR_ISA_FLAGS} ${_mixpar_isa_var})
  if(NOT ${_mixpar_isa_var})
    message(FATAL_ERROR "MIXPAR_ISA=${MIXPAR_ISA}: ${CMAKE_CXX_COMPILER} does not accept "
                        "-march=${MIXPAR_ISA} (x86-64-v3, native, x86-64-v4, sapphirerapids, x86-64)")
  endif()
endif()

# The instruction-set extensions the compiler may now emit, by its predefined macros.
execute_process(
  COMMAND ${CMAKE_CXX_COMPILER} ${MIXPAR_ISA_FLAGS} -dM -E -x c++ /dev/null
  OUTPUT_VARIABLE _mixpar_macros ERROR_QUIET RESULT_VARIABLE _mixpar_rc)
if(NOT _mixpar_rc EQUAL 0)
  message(FATAL_ERROR "MIXPAR_ISA=${MIXPAR_ISA}: could not list the compiler's macros for it")
endif()
# The features common/util/cpu_features.cpp can detect, as macro=name pairs.
foreach(pair SSE4_2=sse4.2 POPCNT=popcnt AVX=avx AVX2=avx2 FMA=fma F16C=f16c BMI=bmi BMI2=bmi2
             LZCNT=lzcnt MOVBE=movbe AVX512F=avx512f AVX512BW=avx512bw AVX512CD=avx512cd
             AVX512DQ=avx512dq AVX512VL=avx512vl AVX512IFMA=avx512ifma AVX512VBMI=avx512vbmi
             AVX512VBMI2=avx512vbmi2 AVX512VNNI=avx512vnni AVX512BITALG=avx512bitalg
             AVX512VPOPCNTDQ=avx512vpopcntdq AVX512BF16=avx512bf16 AVX512FP16=avx512fp16
             AVXVNNI=avxvnni GFNI=gfni VAES=vaes VPCLMULQDQ=vpclmulqdq AMX_TILE=amx-tile
             AMX_BF16=amx-bf16 AMX_INT8=amx-int8)
  string(REPLACE "=" ";" kv "${pair}")
  list(GET kv 0 macro)
  list(GET kv 1 feature)
  if(_mixpar_macros MATCHES "#define __${macro}__ 1")
    list(APPEND MIXPAR_ISA_NEEDS ${feature})
  endif()
endforeach()
list(JOIN MIXPAR_ISA_NEEDS " " MIXPAR_ISA_NEEDS_TEXT)
set(MIXPAR_ISA_HAS_AVX512 OFF)
if("avx512f" IN_LIST MIXPAR_ISA_NEEDS)
  set(MIXPAR_ISA_HAS_AVX512 ON)
endif()
message(STATUS "ISA: ${MIXPAR_ISA} (${MIXPAR_ISA_FLAGS}; needs: ${MIXPAR_ISA_NEEDS_TEXT}); "
               "-DMIXPAR_ISA=native for this host's own, cmake --preset native")
