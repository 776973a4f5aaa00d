// mpirun as every test runs it (tests/CMakeLists.txt, MIXPAR_MPI_TEST_ENV: the same environment
// ctest gives chapter 4's MPI executable). Declared only where CMake found MPI and passed its
// launcher as MIXPAR_MPIEXEC: a test that starts processes sits inside
// `#if defined(MIXPAR_MPIEXEC)`.
#pragma once

#include <string>

namespace mixpar::test_support {

#if defined(MIXPAR_MPIEXEC)
// The start of a command line that runs what follows it as `np` processes: Open MPI allowed to
// run as root (containers), on shared memory only (no network probing, no cross-memory-attach
// single copy, which containers often forbid), oversubscribed (CI machines have 2 cores). The
// program and its flags follow; mpirun's multiple-program form continues with " : -np 1 ...".
std::string mpirun_command(int np);
#endif

}  // namespace mixpar::test_support
