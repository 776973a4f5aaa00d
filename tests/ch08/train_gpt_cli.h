// Running build/bin/train_gpt from a test as a user would (test_support::run_shell: stdout,
// stderr and the exit code), under mpirun too; the one-line-error check every bad input must
// pass; and the JSONL log read back. Used by the command-line tests of chapter 8 (tests/ch08,
// zero/ and tp/ included).
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "command.h"
#include "mpirun.h"
#include "util/json.h"

#ifndef MIXPAR_TRAIN_GPT_PATH
#error "MIXPAR_TRAIN_GPT_PATH must name the train_gpt binary"
#endif

namespace mixpar::ch08::test {

using test_support::CliRun;
using test_support::run_shell;

inline CliRun train_gpt(const TempDir& dir, const std::string& args) {
  return run_shell(dir, std::string(MIXPAR_TRAIN_GPT_PATH) + " " + args);
}

// Exit code 2, nothing on stdout, exactly one line on stderr, "train_gpt: error: ...", naming
// `part`.
inline void expect_one_line_error(const TempDir& dir, const std::string& args,
                                  const std::string& part) {
  test_support::expect_one_line_error(train_gpt(dir, args), "train_gpt", part, args);
}

#if defined(MIXPAR_MPIEXEC)
// The start of a command line that runs train_gpt --backend mpi as np processes
// (test_support::mpirun_command); train_gpt's other flags follow.
inline std::string mpirun_train_gpt(int np) {
  return test_support::mpirun_command(np) + MIXPAR_TRAIN_GPT_PATH + " --backend mpi ";
}
#endif

inline std::vector<Json> read_jsonl(const std::string& path) {
  std::istringstream in(read_bytes(path));
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line, path));
  return out;
}

}  // namespace mixpar::ch08::test
