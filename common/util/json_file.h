// The chapter demos' `--json FILE`: the data behind the chapter's figure (scripts/figures.py
// draws it). The path is checked when the flags are read, before any lesson output or
// compute, so a bad path is the usual one-line InputError (exit code 2), never a lost run.
#pragma once

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

// `path` as given to `flag`, refused (InputError) when empty, when it names a directory, when
// the directory it would be written into does not exist, or when either cannot be looked up.
inline std::string checked_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) throw InputError(flag + ": the path is empty");
  const std::filesystem::path p(path);
  if (output_path_type(flag, p) == std::filesystem::file_type::directory) {
    throw InputError(flag + ": '" + path + "' is a directory, not a file");
  }
  const std::filesystem::path dir = p.parent_path();
  if (!dir.empty() && output_path_type(flag, dir) != std::filesystem::file_type::directory) {
    throw InputError(flag + ": the directory '" + dir.string() + "' does not exist");
  }
  return path;
}

// Writes j (indented, one member per line) to path; InputError if the file cannot be written.
inline void write_json_file(const std::string& path, const Json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << j.dump(1) << '\n';
  out.close();
  if (!out) throw InputError("cannot write '" + path + "'");
}

}  // namespace mixpar
