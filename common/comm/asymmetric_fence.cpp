// The asymmetric fence's heavy half: membarrier(2) where Linux has it.
#include "comm/asymmetric_fence.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mixpar::local {

namespace {

#if defined(__linux__) && defined(SYS_membarrier)
long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0U, 0); }

bool register_membarrier() {
  const char* env = std::getenv("MIXPAR_ASYMMETRIC_FENCE");
  if (env && std::strcmp(env, "0") == 0) return false;
  const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  // A process must register before its first expedited call (Linux 4.14+).
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}
#else
bool register_membarrier() { return false; }
#endif

}  // namespace

bool asymmetric_fence_available() {
  static const bool available = register_membarrier();
  return available;
}

void heavy_fence(bool asymmetric) {
#if defined(__linux__) && defined(SYS_membarrier)
  if (asymmetric) {
    // Registered (asymmetric is only true once asymmetric_fence_available() said so), so the
    // call has no documented way to fail. Were it to, publishers would be running with only
    // the light half, and a wake-up could be lost: stop rather than hang later.
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
      std::fputs("mixpar: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after it was "
                 "registered\n", stderr);
      std::abort();
    }
    return;
  }
#endif
  (void)asymmetric;
}

}  // namespace mixpar::local
