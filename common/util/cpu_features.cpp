// CPU feature detection by CPUID and XGETBV, and the start-up check of cpu_features.h. This
// file is compiled without ISA flags (mixpar_util does not take mixpar_ops' -march), so the
// check runs on any x86-64 CPU.
#include "util/cpu_features.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#ifndef MIXPAR_ISA_NAME
#define MIXPAR_ISA_NAME "unknown"
#endif
#ifndef MIXPAR_ISA_NEEDS
#define MIXPAR_ISA_NEEDS ""
#endif

namespace {
// The end of the refusal, after the missing features.
constexpr const char* kCpuCheckAdvice =
    "; rebuild with -DMIXPAR_ISA=native (this CPU's own) or -DMIXPAR_ISA=x86-64 (any x86-64 CPU)";
}  // namespace

namespace mixpar {
namespace {

#if defined(__x86_64__) || defined(__i386__)
struct CpuidRegs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return {};
  return r;
}

// XCR0: which register states the OS saves (and so lets programs use).
std::uint64_t xcr0() {
  if (!(cpuid(1, 0).c & (1u << 27))) return 0;  // no OSXSAVE: no XGETBV
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }
#endif

// The space-separated words of s.
std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t j = std::min(s.find(' ', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

namespace {

// Whether feature `name` (len bytes, not NUL-terminated) is present. Plain C: the start-up
// check below calls it, and it must not reach a C++ library template whose one copy in the
// program the linker may have taken from a file compiled for the build's ISA.
bool feature_present(const char* name, std::size_t len) {
#if defined(__x86_64__) || defined(__i386__)
  const CpuidRegs l1 = cpuid(1, 0), l7 = cpuid(7, 0), l71 = cpuid(7, 1),
                  ext = cpuid(0x80000001u, 0);
  const std::uint64_t xcr = xcr0();
  const bool os_avx = (xcr & 0x6) == 0x6;            // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr & 0x60000) == 0x60000;    // XTILECFG, XTILEDATA
  struct Row {
    const char* name;
    bool present;
  };
  const Row rows[] = {
      {"sse4.2", bit(l1.c, 20)},
      {"popcnt", bit(l1.c, 23)},
      {"movbe", bit(l1.c, 22)},
      {"lzcnt", bit(ext.c, 5)},
      {"bmi", bit(l7.b, 3)},
      {"bmi2", bit(l7.b, 8)},
      {"avx", os_avx && bit(l1.c, 28)},
      {"fma", os_avx && bit(l1.c, 12)},
      {"f16c", os_avx && bit(l1.c, 29)},
      {"avx2", os_avx && bit(l7.b, 5)},
      {"avxvnni", os_avx && bit(l71.a, 4)},
      {"gfni", bit(l7.c, 8)},
      {"vaes", os_avx && bit(l7.c, 9)},
      {"vpclmulqdq", os_avx && bit(l7.c, 10)},
      {"avx512f", os_avx512 && bit(l7.b, 16)},
      {"avx512dq", os_avx512 && bit(l7.b, 17)},
      {"avx512ifma", os_avx512 && bit(l7.b, 21)},
      {"avx512cd", os_avx512 && bit(l7.b, 28)},
      {"avx512bw", os_avx512 && bit(l7.b, 30)},
      {"avx512vl", os_avx512 && bit(l7.b, 31)},
      {"avx512vbmi", os_avx512 && bit(l7.c, 1)},
      {"avx512vbmi2", os_avx512 && bit(l7.c, 6)},
      {"avx512vnni", os_avx512 && bit(l7.c, 11)},
      {"avx512bitalg", os_avx512 && bit(l7.c, 12)},
      {"avx512vpopcntdq", os_avx512 && bit(l7.c, 14)},
      {"avx512fp16", os_avx512 && bit(l7.d, 23)},
      {"avx512bf16", os_avx512 && bit(l71.a, 5)},
      {"amx-bf16", os_amx && bit(l7.d, 22)},
      {"amx-tile", os_amx && bit(l7.d, 24)},
      {"amx-int8", os_amx && bit(l7.d, 25)},
  };
  for (const Row& r : rows) {
    if (std::strlen(r.name) == len && std::memcmp(r.name, name, len) == 0) return r.present;
  }
#else
  (void)name;
  (void)len;
#endif
  return false;
}

}  // namespace

namespace {

// Whether the word w (len bytes) is one of the space-separated words of the C string list.
bool in_word_list(const char* list, const char* w, std::size_t len) {
  for (const char* p = list; *p != '\0';) {
    while (*p == ' ') ++p;
    const char* e = p;
    while (*e != '\0' && *e != ' ') ++e;
    if (static_cast<std::size_t>(e - p) == len && std::memcmp(p, w, len) == 0) return true;
    p = e;
  }
  return false;
}

}  // namespace

// MIXPAR_PRETEND_CPU_LACKS hides features from every run-time choice too (the FP32 GEMM kernel,
// the 16-bit conversions, the MFU's compute unit), not only from the start-up check: an
// AVX-512 machine then runs what an AVX2-only one would, for measuring both on one machine.
bool cpu_has(std::string_view f) {
  const char* pretend = std::getenv("MIXPAR_PRETEND_CPU_LACKS");
  if (pretend != nullptr && in_word_list(pretend, f.data(), f.size())) return false;
  return feature_present(f.data(), f.size());
}

std::string_view build_isa() { return MIXPAR_ISA_NAME; }
std::string_view build_isa_needs() { return MIXPAR_ISA_NEEDS; }

std::vector<std::string> missing_cpu_features(std::string_view needs,
                                              const std::function<bool(std::string_view)>& has) {
  std::vector<std::string> missing;
  for (const std::string_view f : words(needs)) {
    if (!has(f)) missing.emplace_back(f);
  }
  return missing;
}

std::string cpu_check_message(std::string_view isa, const std::vector<std::string>& missing) {
  if (missing.empty()) return {};
  std::string list;
  for (const std::string& f : missing) list += (list.empty() ? "" : " ") + f;
  return "error: this program was built for " + std::string(isa) + " (MIXPAR_ISA) and this CPU lacks " +
         list + kCpuCheckAdvice;
}

}  // namespace mixpar

// Referenced by the linker (mixpar_ops' --undefined), so that every program linking the CPU
// engine keeps this object and its constructor.
extern "C" {
int mixpar_cpu_check_anchor = 0;
}

namespace {


// Priority 101: before every static initialiser of default priority in the program, which may
// already be compiled for the build's ISA. Plain C throughout (see feature_present), and this
// file is compiled for plain x86-64 whatever the build's ISA (common/util/CMakeLists.txt).
// MIXPAR_PRETEND_CPU_LACKS (space-separated feature names) makes the check treat those as
// absent: how the refusal is tested on a CPU that has everything. The line it prints is
// cpu_check_message's (CpuFeatures tests compare them).
__attribute__((constructor(101))) void mixpar_check_cpu_at_start() {
  const char* pretend = std::getenv("MIXPAR_PRETEND_CPU_LACKS");
  if (pretend == nullptr) pretend = "";
  const char* needs = MIXPAR_ISA_NEEDS;
  char missing[512];
  std::size_t used = 0;
  for (const char* p = needs; *p != '\0';) {
    while (*p == ' ') ++p;
    const char* e = p;
    while (*e != '\0' && *e != ' ') ++e;
    const std::size_t len = static_cast<std::size_t>(e - p);
    if (len > 0 && (mixpar::in_word_list(pretend, p, len) || !mixpar::feature_present(p, len)) &&
        used + len + 2 < sizeof missing) {
      if (used > 0) missing[used++] = ' ';
      std::memcpy(missing + used, p, len);
      used += len;
    }
    p = e;
  }
  if (used == 0) return;
  missing[used] = '\0';
  std::fputs("error: this program was built for " MIXPAR_ISA_NAME " (MIXPAR_ISA) and this CPU lacks ",
             stderr);
  std::fputs(missing, stderr);
  std::fputs(kCpuCheckAdvice, stderr);
  std::fputs("\n", stderr);
  std::_Exit(2);
}

}  // namespace
