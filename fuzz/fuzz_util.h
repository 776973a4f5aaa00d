// What every harness shares: inputs that are files (the readers under test take paths, as the
// trainer calls them) go to one scratch directory per fuzzing process, and the only outcome
// allowed besides success is an InputError (bad input, one line). Anything else escaping a
// reader (another exception, a crash, a sanitizer report) is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/errors.h"

namespace mixpar::fuzz {

// This process's scratch directory, made once.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                    ("mixpar-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_input(const std::filesystem::path& path, const std::uint8_t* data,
                               std::size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path.string();
}

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A command line from the input: the program's name, then the input split at newlines, one
// argument a line ("a\n\nb" holds an empty argument). "--help..." and "-h", which print the
// usage and exit by design, become "x". argv()[argc()] is null, as main's is.
class CommandLine {
 public:
  CommandLine(std::string prog, std::string_view input) {
    args_.push_back(std::move(prog));
    std::string cur;
    for (char ch : input) {
      if (ch == '\n') {
        args_.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(ch);
      }
    }
    args_.push_back(cur);
    for (std::string& a : args_) {
      if (a.rfind("--help", 0) == 0 || a == "-h") a = "x";
      argv_.push_back(a.data());
    }
    argv_.push_back(nullptr);
  }
  CommandLine(const CommandLine&) = delete;  // argv points into args
  CommandLine& operator=(const CommandLine&) = delete;

  int argc() const { return static_cast<int>(argv_.size()) - 1; }
  char** argv() { return argv_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> argv_;
};

// Runs f; an InputError is the expected answer to bad input.
template <class F>
void expect_only_input_errors(F&& f) {
  try {
    f();
  } catch (const InputError&) {
  }
}

// A property the harness checks besides "no crash": abort with a message (libFuzzer saves the
// input that did it).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace mixpar::fuzz
