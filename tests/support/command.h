// Running a program from a test as a user would: a shell command line with its stdout and
// stderr captured apart, and its exit code; and the check every bad input must pass, one line
// on stderr naming the problem and exit code 2 before any work.
#pragma once

#include <string>

#include "temp_dir.h"

namespace mixpar::test_support {

struct CliRun {
  int code = -1;  // the exit code; -1 when the command did not exit (a signal ended it)
  std::string out, err;
};

// cmd run by the shell (so it may hold redirections, pipes and environment assignments), its
// output captured in dir's files "stdout" and "stderr", which a later run overwrites.
CliRun run_shell(const TempDir& dir, const std::string& cmd);

// Exit code 2, nothing on stdout, exactly one line on stderr, starting "<program>: error: "
// and naming `part`. `command` (what was run, or its flags) is printed with a failure.
void expect_one_line_error(const CliRun& r, const std::string& program, const std::string& part,
                           const std::string& command);

}  // namespace mixpar::test_support
