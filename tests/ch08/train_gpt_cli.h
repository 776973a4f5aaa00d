// Running build/bin/train_gpt from a test as a user would: a shell command with stdout and
// stderr captured, its exit code, the one-line-error check every bad input must pass, and the
// JSONL log read back. Used by the command-line tests of chapters 5 and 8.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "ch08_test_util.h"
#include "util/json.h"

#ifndef MIXPAR_TRAIN_GPT_PATH
#error "MIXPAR_TRAIN_GPT_PATH must name the train_gpt binary"
#endif

namespace mixpar::ch08::test {

struct CliRun {
  int code = -1;
  std::string out, err;
};

// cmd run by the shell, its output in dir's stdout and stderr files.
inline CliRun run_shell(const TempDir& dir, const std::string& cmd) {
  const int status =
      std::system((cmd + " > " + dir.file("stdout") + " 2> " + dir.file("stderr")).c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_bytes(dir.file("stdout"));
  r.err = read_bytes(dir.file("stderr"));
  return r;
}

inline CliRun train_gpt(const TempDir& dir, const std::string& args) {
  return run_shell(dir, std::string(MIXPAR_TRAIN_GPT_PATH) + " " + args);
}

// Exit code 2, nothing on stdout, exactly one line on stderr that names `part`.
inline void expect_one_line_error(const TempDir& dir, const std::string& args,
                                  const std::string& part) {
  const CliRun r = train_gpt(dir, args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_TRUE(r.err.starts_with("train_gpt: error: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "want '" << part << "' in: " << r.err;
}

inline std::vector<Json> read_jsonl(const std::string& path) {
  std::istringstream in(read_bytes(path));
  std::vector<Json> out;
  for (std::string line; std::getline(in, line);) out.push_back(Json::parse(line, path));
  return out;
}

}  // namespace mixpar::ch08::test
