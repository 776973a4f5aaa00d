// Errors that belong to the user, not to the program: a bad flag, a configuration that cannot
// work, a missing or corrupt file. Tools print them as one line and exit with code 2;
// anything else escaping main is a bug and exits with 1.
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

// Runs body(argc, argv); InputError -> "prog: error: <message>" on stderr and exit code 2;
// std::bad_alloc -> "prog: error: out of memory ..." and exit code 2 (the input asked for more
// than the machine has); any other std::exception -> "prog: internal error: <message>" and
// exit code 1.
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace mixpar
