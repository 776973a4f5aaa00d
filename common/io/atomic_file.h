// Whole-file reads and crash-safe writes. write_file_atomic writes a temporary file next to
// the target, fsyncs it, renames it over the target and fsyncs the directory: a reader sees
// the old file or the new one, never a partial one, even if the machine dies mid-write.
// Every failure (missing file, full disk, no permission) is an InputError naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace mixpar {

// The whole file as bytes. InputError "<path>: cannot open: No such file or directory".
std::string read_file(const std::string& path);

// Size in bytes of an existing regular file, same errors as read_file.
std::uint64_t file_size(const std::string& path);

// The byte stream handed to a streaming writer: buffered, and every failure of the
// underlying write(2) becomes an InputError naming the target.
class FileSink {
 public:
  FileSink(int fd, std::string target);
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  std::uint64_t bytes_written() const { return written_; }
  void flush();  // hands the buffer to the kernel (fsync is the caller's business)

 private:
  void write_all(const char* p, std::size_t bytes);
  static constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
  int fd_;
  std::string target_;
  std::string buffer_;
  std::uint64_t written_ = 0;
};

// Outputs replace regular files only: an InputError "<path> is a FIFO, not a regular file:
// ..." when path exists (following symbolic links) and is anything else (a device such as
// /dev/full, a FIFO, a socket, a directory). A missing path, or a dangling link, is fine.
// write_file_atomic checks it before it writes; pre-flights call it to refuse early.
void check_replaceable(const std::string& path);

// Replaces `path` with `bytes` atomically (the directory must exist; check_replaceable).
void write_file_atomic(const std::string& path, std::string_view bytes);

// Streaming variant: `fill` writes the content into the sink. If `fill` throws, the
// temporary file is removed, the target is left untouched, and the exception propagates.
void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill);

}  // namespace mixpar
