// The chapter demos' `--json FILE` (and ch04's `--trace FILE`): the data behind the chapter's
// figure (scripts/figures.py draws it). The path is checked when the flags are read, before
// any lesson output or compute, so a bad path is the usual one-line InputError (exit code 2),
// never a lost run; an existing file is replaced only with the demo's --overwrite.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "util/errors.h"
#include "util/json.h"

namespace mixpar {

// What is at `p` (file_type::not_found when nothing is). A path the system cannot even look
// up (a name too long, a loop of links, a directory it may not search) is the user's, refused
// naming the flag: never the filesystem_error a bare is_directory() throws, which would leave
// the tool as an internal error (exit code 1).
inline std::filesystem::file_type output_path_type(const std::string& flag,
                                                   const std::filesystem::path& p) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(p, ec);
  if (status.type() == std::filesystem::file_type::none) {
    throw InputError(flag + ": cannot look up '" + p.string() + "': " + ec.message());
  }
  return status.type();
}

// A demo's --overwrite replaces an existing output file; without one of its outputs given
// (`outputs` names them: "--json") it would do nothing, so it is refused naming what it needs,
// as train_gpt refuses flags that have no effect.
inline void refuse_overwrite_without_output(bool overwrite, bool output_given,
                                            const std::string& outputs) {
  if (overwrite && !output_given) {
    throw InputError("--overwrite replaces an existing output file: it needs " + outputs);
  }
}

// The demos' outputs follow train_gpt's rules, checked when the flags are read so that a bad
// target is one line before the lesson runs (not found after it, or a demo blocked forever on a
// FIFO): `path` as given to `flag` is refused (InputError) when it is empty, a directory, not a
// regular file (a FIFO, a device node, a socket, or a link to one: never written, never
// replaced), an existing file without `overwrite` (never replaced silently), in a directory that
// does not exist, or where this process cannot write (the directory is probed by creating and
// removing a file in it; the reason is named).
inline std::string checked_output_path(const std::string& flag, const std::string& path,
                                       bool overwrite) {
  namespace fs = std::filesystem;
  if (path.empty()) throw InputError(flag + ": the path is empty");
  const fs::path p(path);
  const fs::file_type type = output_path_type(flag, p);
  if (type == fs::file_type::directory) {
    throw InputError(flag + ": '" + path + "' is a directory, not a file");
  }
  if (type != fs::file_type::not_found && type != fs::file_type::regular) {
    const char* kind = type == fs::file_type::fifo        ? "a FIFO"
                       : type == fs::file_type::character ? "a character device"
                       : type == fs::file_type::block     ? "a block device"
                       : type == fs::file_type::socket    ? "a socket"
                                                          : "not a regular file";
    throw InputError(flag + ": '" + path + "' is " + kind +
                     ": outputs are regular files only (never written into, never replaced)");
  }
  if (type == fs::file_type::regular && !overwrite) {
    throw InputError(flag + ": '" + path +
                     "' exists: pass --overwrite to replace it, or choose another path");
  }
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (output_path_type(flag, dir) != fs::file_type::directory) {
    throw InputError(flag + ": the directory '" + dir.string() + "' does not exist");
  }
  const fs::path probe = dir / (".mixpar-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw InputError(flag + ": cannot write in '" + dir.string() + "': " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  if (type == fs::file_type::regular && ::access(path.c_str(), W_OK) != 0) {
    throw InputError(flag + ": cannot write '" + path + "': " + std::strerror(errno));
  }
  return path;
}

// Writes j (indented, one member per line) to path; InputError naming the reason if the file
// cannot be written.
inline void write_json_file(const std::string& path, const Json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
  out << j.dump(1) << '\n';
  out.close();
  if (!out) throw InputError("cannot write '" + path + "': " + std::strerror(errno));
}

}  // namespace mixpar
