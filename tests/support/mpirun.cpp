#include "mpirun.h"

namespace mixpar::test_support {

#if defined(MIXPAR_MPIEXEC)
std::string mpirun_command(int np) {
  return std::string("env ") + MIXPAR_MPIRUN_ENV + " " + MIXPAR_MPIEXEC + " --oversubscribe -np " +
         std::to_string(np) + " ";
}
#endif

}  // namespace mixpar::test_support
