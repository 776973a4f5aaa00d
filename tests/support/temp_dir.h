// Files a test writes and reads back: a scratch directory per test, removed afterwards, and
// whole-file reads and writes (plain, not atomic: a test builds corrupt inputs byte by byte).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mixpar::test_support {

// A fresh directory under the system's temporary directory, named by the process and a
// counter, so that tests running in parallel (ctest -j, one process per test) never share one.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }
  // Every entry's name, hidden ones included, sorted.
  std::vector<std::string> entries() const;

 private:
  std::filesystem::path path_;
};

// The whole file, byte for byte; empty when it cannot be read.
std::string read_bytes(const std::string& path);

// A plain (non-atomic) write, to build files exactly as a test wants them, corrupt included.
void write_raw(const std::string& path, const std::string& bytes);

}  // namespace mixpar::test_support
