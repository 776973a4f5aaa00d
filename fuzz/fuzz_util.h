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
