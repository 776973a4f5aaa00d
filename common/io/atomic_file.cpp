// POSIX implementation of atomic_file.h. The temporary file is `<target>.tmp.<pid>.<n>` in the
// target's directory: rename(2) is only atomic within one file system, and a stale temporary
// left by a killed process is recognisable by name.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "util/errors.h"

namespace mixpar {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw InputError(path + ": " + what + ": " + std::strerror(err));
}

// Closes a descriptor on every path out of a scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// What a path that is not a regular file is, for the refusal.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "another kind of file";
}

// Only regular files are read: a FIFO with no writer would block forever, /dev/zero never
// ends, /dev/null is empty by nature. O_NONBLOCK so that opening a FIFO returns at once (it is
// then refused by kind); a regular file ignores the flag.
int open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, "cannot read", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(path + ": not a regular file (" + std::string(file_kind(st.st_mode)) + ")");
  }
  return fd;
}

std::string temp_path_for(const std::string& path) {
  static std::atomic<std::uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// A file's new name is durable only once its directory is synced too.
void fsync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail(dir, "cannot open directory to sync it", errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail(dir, "cannot sync directory", errno);
}

}  // namespace

std::string read_file(const std::string& path) {
  Fd fd(open_for_reading(path));
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "cannot read", errno);
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  return bytes;
}

std::uint64_t file_size(const std::string& path) {
  Fd fd(open_for_reading(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat", errno);
  return static_cast<std::uint64_t>(st.st_size);
}

FileSink::FileSink(int fd, std::string target) : fd_(fd), target_(std::move(target)) {
  buffer_.reserve(kBufferBytes);
}

void FileSink::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + bytes > kBufferBytes) flush();
  if (bytes >= kBufferBytes) {  // large blocks (a tensor) go straight to the kernel
    write_all(p, bytes);
  } else {
    buffer_.append(p, bytes);
  }
  written_ += bytes;
}

void FileSink::flush() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void FileSink::write_all(const char* p, std::size_t bytes) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd_, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(target_, "cannot write", errno);
    done += static_cast<std::size_t>(n);
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](FileSink& sink) { sink.write(bytes); });
}

void check_replaceable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // nothing there (or a dangling link): created
  if (S_ISREG(st.st_mode)) return;
  // rename(2) would put a regular file where the device node, FIFO or socket was (as root,
  // /dev/full became a regular file): never replaced, with or without --overwrite.
  struct stat link {};
  const bool via_link = ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  throw InputError(path + (via_link ? " links to " : " is ") + file_kind(st.st_mode) +
                   ", not a regular file: outputs replace regular files only");
}

void write_file_atomic(const std::string& path, const std::function<void(FileSink&)>& fill) {
  check_replaceable(path);
  const std::string tmp = temp_path_for(path);
  // 0666 minus the umask: the file gets the permissions any newly created file would.
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0) fail(path, "cannot create " + tmp, errno);
  try {
    FileSink sink(fd.get(), path);
    fill(sink);
    sink.flush();
    if (::fsync(fd.get()) != 0) fail(path, "cannot sync " + tmp, errno);
    if (::close(fd.release()) != 0) fail(path, "cannot close " + tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      fail(path, "cannot rename " + tmp + " over it", errno);
    }
  } catch (...) {
    ::unlink(tmp.c_str());  // the target was never touched; drop the partial copy
    throw;
  }
  fsync_directory_of(path);
}

}  // namespace mixpar
