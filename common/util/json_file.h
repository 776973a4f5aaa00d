// The chapter demos' `--json FILE`: the data behind the chapter's figure (scripts/figures.py
// draws it). The path is checked when the flags are read, before any lesson output or
// compute, so a bad path is the usual one-line InputError (exit code 2), never a lost run.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "util/errors.h"
#include "util/json.h"

namespace mixpar {

// `path` as given to `flag`, refused (InputError) when empty, when it names a directory, or
// when the directory it would be written into does not exist.
inline std::string checked_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) throw InputError(flag + ": the path is empty");
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) {
    throw InputError(flag + ": '" + path + "' is a directory, not a file");
  }
  const std::filesystem::path dir = p.parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir)) {
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
