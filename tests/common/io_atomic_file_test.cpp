// Atomic writes: the new content replaces the old, a writer that fails midway leaves the old
// file intact and no temporary behind, and I/O failures are InputErrors naming the path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "expect.h"
#include "io/atomic_file.h"
#include "temp_dir.h"

namespace mixpar {
namespace {

using test_support::input_error_of;
using test_support::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AtomicWrite, ReplacesTheContent) {
  TempDir dir;
  write_file_atomic(dir.file("f"), "old content");
  write_file_atomic(dir.file("f"), "new");
  EXPECT_EQ(read_file(dir.file("f")), "new");
  EXPECT_EQ(file_size(dir.file("f")), 3u);
  EXPECT_THAT(dir.entries(), ElementsAre("f"));
}

TEST(AtomicWrite, AFailedWriteLeavesTheOldFileIntactAndNoTempFiles) {
  TempDir dir;
  write_file_atomic(dir.file("ckpt"), "old checkpoint");
  const std::string half(3 << 20, 'x');  // past the sink's buffer: bytes reached the temp file
  EXPECT_THROW(write_file_atomic(dir.file("ckpt"),
                                 [&](FileSink& sink) {
                                   sink.write(half);
                                   throw std::runtime_error("disk died");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_file(dir.file("ckpt")), "old checkpoint");
  EXPECT_THAT(dir.entries(), ElementsAre("ckpt"));
}

TEST(AtomicWrite, AFailedFirstWriteLeavesNothing) {
  TempDir dir;
  EXPECT_THROW(
      write_file_atomic(dir.file("new"), [](FileSink&) { throw std::runtime_error("no"); }),
      std::runtime_error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicWrite, StreamsLargeAndSmallPiecesInOrder) {
  TempDir dir;
  std::string want;
  write_file_atomic(dir.file("big"), [&](FileSink& sink) {
    for (int k = 0; k < 40; ++k) {
      const std::string piece(static_cast<std::size_t>(k % 3 == 0 ? 700000 : 13),
                              static_cast<char>('a' + k % 26));
      sink.write(piece);
      want += piece;
    }
    EXPECT_EQ(sink.bytes_written(), want.size());
  });
  EXPECT_EQ(read_file(dir.file("big")), want);
}

TEST(AtomicWrite, AMissingDirectoryIsAnInputErrorNamingThePath) {
  TempDir dir;
  EXPECT_THAT(input_error_of([&] { write_file_atomic(dir.file("no/such/dir/f"), "x"); }),
              HasSubstr(dir.file("no/such/dir/f") + ": cannot create"));
}

TEST(AtomicWrite, ReadingAMissingFileOrADirectoryIsAnInputError) {
  TempDir dir;
  EXPECT_THAT(input_error_of([&] { read_file(dir.file("absent")); }),
              HasSubstr("absent: cannot open: No such file or directory"));
  EXPECT_THAT(input_error_of([&] { read_file(dir.str()); }),
              HasSubstr("not a regular file (a directory)"));
}

// Only regular files are read: a FIFO with no writer used to block the reader forever, and
// /dev/zero and /dev/null failed with "cannot read: Success".
TEST(AtomicWrite, ReadingAFifoOrADeviceIsRefusedAtOnceByKind) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_THAT(input_error_of([&] { read_file(dir.file("fifo")); }),
              HasSubstr("fifo: not a regular file (a FIFO)"));
  EXPECT_THAT(input_error_of([&] { file_size(dir.file("fifo")); }), HasSubstr("(a FIFO)"));
  for (const char* dev : {"/dev/zero", "/dev/null"}) {
    EXPECT_THAT(input_error_of([&] { read_file(dev); }),
                HasSubstr(std::string(dev) + ": not a regular file (a character device)"));
  }
}

// rename(2) puts a regular file where anything was: as root, /dev/full became one. Outputs
// replace regular files only; a FIFO, a device or a link to one is refused and left alone.
TEST(AtomicWrite, ReplacesRegularFilesOnlyNeverADeviceOrAFifo) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink("/dev/full", dir.file("full").c_str()), 0);
  ASSERT_EQ(::symlink(dir.file("fifo").c_str(), dir.file("to_fifo").c_str()), 0);
  EXPECT_EQ(input_error_of([&] { write_file_atomic(dir.file("fifo"), "x"); }),
            dir.file("fifo") + " is a FIFO, not a regular file: outputs replace regular files only");
  EXPECT_THAT(input_error_of([&] { write_file_atomic(dir.file("full"), "x"); }),
              HasSubstr("full links to a character device, not a regular file"));
  EXPECT_THAT(input_error_of([&] { write_file_atomic(dir.file("to_fifo"), "x"); }),
              HasSubstr("links to a FIFO"));
  EXPECT_THAT(input_error_of([] { check_replaceable("/dev/full"); }),
              HasSubstr("/dev/full is a character device"));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  ASSERT_EQ(::lstat(dir.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_THAT(dir.entries(), ElementsAre("fifo", "full", "to_fifo"));  // no temporary left
  // A regular file, a link to one and a dangling link are replaced as before.
  write_file_atomic(dir.file("f"), "old");
  EXPECT_NO_THROW(check_replaceable(dir.file("f")));
  EXPECT_NO_THROW(check_replaceable(dir.file("missing")));
  ASSERT_EQ(::symlink(dir.file("gone").c_str(), dir.file("dangling").c_str()), 0);
  EXPECT_NO_THROW(write_file_atomic(dir.file("dangling"), "x"));
}

}  // namespace
}  // namespace mixpar
