#include "command.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>

namespace mixpar::test_support {

CliRun run_shell(const TempDir& dir, const std::string& cmd) {
  const int status =
      std::system((cmd + " > " + dir.file("stdout") + " 2> " + dir.file("stderr")).c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_bytes(dir.file("stdout"));
  r.err = read_bytes(dir.file("stderr"));
  return r;
}

void expect_one_line_error(const CliRun& r, const std::string& program, const std::string& part,
                           const std::string& command) {
  EXPECT_EQ(r.code, 2) << command << "\n" << r.err;
  EXPECT_EQ(r.out, "") << command;
  EXPECT_TRUE(r.err.starts_with(program + ": error: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "want '" << part << "' in: " << r.err;
}

}  // namespace mixpar::test_support
