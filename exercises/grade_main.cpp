// The grader's own main (exercises/grade.py links it in place of gtest_main): it runs the ONE
// test named on its command line and reports that test's verdict to the grader through a
// channel the student's code does not control (the threat model: docs/COURSE.md, "What the
// grader protects against").
//
//   exercise_NAME Suite.Name NONCE_FD RESULT_FD
//
// NONCE_FD is a pipe the grader filled with a fresh random nonce and closed: it is read and
// closed here, before any test runs (the grader refuses student files that would run code
// before main). RESULT_FD is a file the grader opened: after the test, one line
// "NONCE pass|fail Suite.Name" is written to it. The grader counts a test as passed only when
// that line, and nothing else, is there and the process exited 0; a student's file that exits
// early, writes its own lines, or runs other tests cannot produce it without the nonce.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

std::string read_nonce(int fd) {
  std::string nonce;
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    nonce.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  while (!nonce.empty() && (nonce.back() == '\n' || nonce.back() == '\r')) nonce.pop_back();
  return nonce;
}

// True when exactly one test ran, it is `wanted`, and it passed without being skipped.
bool only_wanted_test_passed(const std::string& wanted) {
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  int ran = 0;
  bool passed = false;
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const testing::TestInfo& info = *suite.GetTestInfo(j);
      if (!info.should_run()) continue;
      ++ran;
      const testing::TestResult& r = *info.result();
      passed = std::string(suite.name()) + "." + info.name() == wanted && r.Passed() &&
               !r.Skipped();
    }
  }
  return ran == 1 && passed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 3;
  const std::string wanted = argv[1];
  const int nonce_fd = std::atoi(argv[2]);
  const int result_fd = std::atoi(argv[3]);
  // A test name is letters, digits, '_' and '/' around one '.': no filter pattern can hide in it.
  if (wanted.find_first_of("*?:-") != std::string::npos) return 3;
  const std::string nonce = read_nonce(nonce_fd);
  if (nonce.size() < 16) return 3;
  int gtest_argc = 1;
  testing::InitGoogleTest(&gtest_argc, argv);
  GTEST_FLAG_SET(filter, wanted);
  GTEST_FLAG_SET(also_run_disabled_tests, false);
  const int rc = RUN_ALL_TESTS();
  const bool pass = rc == 0 && only_wanted_test_passed(wanted);
  const std::string line = nonce + (pass ? " pass " : " fail ") + wanted + "\n";
  const bool written = ::write(result_fd, line.data(), line.size()) ==
                       static_cast<ssize_t>(line.size());
  ::close(result_fd);
  return written ? 0 : 3;
}
