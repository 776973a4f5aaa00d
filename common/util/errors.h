// Errors that belong to the user, not to the program: a bad flag, a configuration that cannot
// work, a missing or corrupt file. Tools print them as one line and exit with code 2;
// a run that halts itself (RunHalted) exits with 3; a rank stuck in communication past its
// watchdog's limit exits with 4 (kExitWatchdog, on every backend); anything else escaping
// main is a bug and exits with 1. The table is in README.md and docs/REFERENCE.md.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace mixpar {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int kExitInputError = 2;

// A run that stopped itself because going on would only corrupt its result (a non-finite loss
// with no loss scaler to skip the step): neither bad input nor a bug. Tools print
// "prog: halted: <message>" and exit with code 3; what was written before (checkpoints, logs)
// stays as it was.
class RunHalted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int kExitRunHalted = 3;

// A communication call that did not finish within the watchdog's limit (--comm-timeout): the
// run was stuck, neither bad input nor a halted run nor a bug of ours. An exception type that
// carries this mark (CommWatchdogTimeout of common/comm) makes run_main print
// "prog: watchdog: <message>" and exit with kExitWatchdog; the MPI watchdog, which can only
// abort the job, aborts it with that code too.
class WatchdogTimeoutMark {
 public:
  virtual ~WatchdogTimeoutMark() = default;
};

inline constexpr int kExitWatchdog = 4;

// `message` on one line: a newline or carriage return (a path may hold one) written as \n or
// \r, so every error stays the one line the tools promise.
std::string one_line(const std::string& message);

// Runs body(argc, argv); InputError -> "prog: error: <message>" on stderr and exit code 2;
// std::bad_alloc -> "prog: error: out of memory ..." and exit code 2 (the input asked for more
// than the machine has); any other std::exception -> "prog: internal error: <message>" and
// exit code 1.
// RunHalted -> "prog: halted: <message>" and exit code 3; a watchdog timeout (an exception
// that is also a WatchdogTimeoutMark) -> "prog: watchdog: <message>" and exit code 4.
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace mixpar
