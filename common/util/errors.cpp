#include "util/errors.h"

#include <cstdio>
#include <new>
#include <string>

namespace mixpar {

namespace {
std::string prog_name(char** argv) {
  std::string p = argv && argv[0] ? argv[0] : "mixpar";
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
}  // namespace

std::string one_line(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else {
      out += ch;
    }
  }
  return out;
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return body(argc, argv);
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: error: %s\n", prog_name(argv).c_str(),
                 one_line(e.what()).c_str());
    return kExitInputError;
  } catch (const RunHalted& e) {
    std::fprintf(stderr, "%s: halted: %s\n", prog_name(argv).c_str(),
                 one_line(e.what()).c_str());
    return kExitRunHalted;
  } catch (const std::bad_alloc&) {
    // Not a bug: the input asked for more memory than the machine would give (a model or a
    // batch too large). One line and exit code 2, as for any input that cannot work.
    std::fprintf(stderr,
                 "%s: error: out of memory (std::bad_alloc): the run asks for more memory than "
                 "this machine can allocate; use a smaller model, batch or sequence\n",
                 prog_name(argv).c_str());
    return kExitInputError;
  } catch (const std::exception& e) {
    if (dynamic_cast<const WatchdogTimeoutMark*>(&e) != nullptr) {
      std::fprintf(stderr, "%s: watchdog: %s\n", prog_name(argv).c_str(),
                 one_line(e.what()).c_str());
      return kExitWatchdog;
    }
    std::fprintf(stderr, "%s: internal error: %s\n", prog_name(argv).c_str(),
                 one_line(e.what()).c_str());
    return 1;
  }
}

}  // namespace mixpar
