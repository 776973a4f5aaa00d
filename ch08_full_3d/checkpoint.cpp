// The directory mechanics of checkpoints; what goes into one is the trainer's business
// (trainer_state.cpp). rename(2) of a directory is atomic within a file system, which is why
// the partial directory lives next to its final name, inside root.
#include "checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "comm/control.h"
#include "io/atomic_file.h"
#include "io/token_loader.h"
#include "tensor/tensor.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "mixpar-checkpoint";
constexpr std::int64_t kVersion = 1;

// A directory's entries reach the disk only when the directory itself is synced.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw InputError(dir.string() + ": cannot open directory: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) {
    throw InputError(dir.string() + ": cannot sync directory: " + std::strerror(err));
  }
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    throw InputError("cannot rename " + from.string() + " to " + to.string() + ": " + ec.message());
}

Json make_manifest(const fs::path& dir, std::int64_t step) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  Json files = Json::array();
  for (const std::string& name : names) files.push_back(manifest_entry(dir.string(), name));
  return manifest_of(std::move(files), step);
}

// step-K directories under root, oldest first.
std::vector<std::pair<std::int64_t, fs::path>> list_checkpoints(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  for (const fs::directory_entry& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    long long step = 0;
    char tail = 0;
    if (e.is_directory() && std::sscanf(name.c_str(), "step-%lld%c", &step, &tail) == 1) {
      out.emplace_back(step, e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Removes all but the newest `keep` checkpoints (never `current`). A directory that cannot be
// removed is left in place: pruning is housekeeping, the save itself has succeeded.
void prune(const fs::path& root, std::int64_t keep, const fs::path& current) {
  const auto all = list_checkpoints(root);
  const auto n = static_cast<std::int64_t>(all.size());
  for (std::int64_t i = 0; i + keep < n; ++i) {
    const fs::path& dir = all[static_cast<std::size_t>(i)].second;
    std::error_code ec;
    if (dir != current) fs::remove_all(dir, ec);
  }
}

// Moves `partial` to `final`, replacing a directory of that name (a re-run writing the same
// step): the old one is set aside first, so there is no moment without a complete copy.
void commit_directory(const fs::path& partial, const fs::path& final_dir) {
  if (fs::exists(final_dir)) {
    std::string old_name = ".";  // appended, not operator+: GCC 12's false -Wrestrict (105329)
    old_name += final_dir.filename().string();
    old_name += ".old";
    const fs::path old = final_dir.parent_path() / old_name;
    std::error_code ec;
    fs::remove_all(old, ec);
    rename_or_throw(final_dir, old);
    rename_or_throw(partial, final_dir);
    fs::remove_all(old, ec);
  } else {
    rename_or_throw(partial, final_dir);
  }
  fsync_dir(final_dir.parent_path());
}

void check_file(const fs::path& dir, const Json& f) {
  const std::string name = f.at("name").as_string();
  const fs::path path = dir / name;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      !fs::is_regular_file(path)) {
    throw InputError(path.string() + ": missing (listed in the checkpoint's manifest)");
  }
  const std::int64_t listed = f.at("bytes").as_int();
  const auto bytes = static_cast<std::int64_t>(file_size(path.string()));
  if (bytes != listed) {
    throw InputError(path.string() + ": " + std::to_string(bytes) + " bytes, the manifest says " +
                     std::to_string(listed) + " (truncated or corrupt checkpoint)");
  }
  if (file_checksum(path.string()) != f.at("fnv1a64").as_string()) {
    throw InputError(path.string() + ": checksum differs from the manifest (corrupt checkpoint)");
  }
}

// What a manifest says about itself, before any file is read: a checkpoint of step K lives in
// step-K/, holds at least one file, and lists each once.
void check_manifest_semantics(const Json& m, const fs::path& dir) {
  const std::int64_t step = m.at("step").as_int();
  if (step < 0) throw InputError("step " + std::to_string(step) + " is negative");
  const std::string name = dir.filename().string();
  const std::int64_t named = step_of_checkpoint_name(name);
  if (named != step) {
    throw InputError("step " + std::to_string(step) + " disagrees with the directory's name " +
                     name + " (" + checkpoint_name(step) + " expected)");
  }
  const Json::Array& files = m.at("files").as_array();
  if (files.empty()) throw InputError("the list of files is empty");
  std::vector<std::string> names;
  for (const Json& f : files) names.push_back(f.at("name").as_string());
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    throw InputError("file " + *std::adjacent_find(names.begin(), names.end()) +
                     " is listed twice");
  }
}

}  // namespace

std::string checkpoint_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

Json manifest_entry(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / name).string();
  Json f = Json::object();
  f.set("name", name);
  f.set("bytes", static_cast<std::int64_t>(file_size(path)));
  f.set("fnv1a64", file_checksum(path));
  return f;
}

Json manifest_of(Json files, std::int64_t step) {
  Json::Array& list = files.as_array();
  std::sort(list.begin(), list.end(), [](const Json& a, const Json& b) {
    return a.at("name").as_string() < b.at("name").as_string();
  });
  Json m = Json::object();
  m.set("format", kFormat);
  m.set("version", kVersion);
  m.set("step", step);
  m.set("files", std::move(files));
  return m;
}

std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  std::vector<char> buf(std::size_t{1} << 20);
  std::uint64_t h = 14695981039346656037ull;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      h = (h ^ static_cast<unsigned char>(buf[static_cast<std::size_t>(i)])) * 1099511628211ull;
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

void on_every_rank(Communicator* comm, const std::string& what, const std::function<void()>& f) {
  std::exception_ptr error;
  std::string message;
  bool input_error = false;
  try {
    f();
  } catch (const InputError& e) {
    error = std::current_exception();
    message = e.what();
    input_error = true;
  } catch (const std::exception& e) {
    error = std::current_exception();
    message = e.what();
  } catch (...) {
    error = std::current_exception();
    message = "unknown error";
  }
  if (comm == nullptr) {
    if (error) std::rethrow_exception(error);
    return;
  }
  // The lowest failing rank's reason reaches every rank, so whichever rank reports the run's
  // error (rank 0 under mpirun, the first to throw among threads) prints the real one, once,
  // and the same one however the threads are timed: every other rank, failing or not, throws
  // that rank's reason.
  const int failed = lowest_rank_where(*comm, error != nullptr);
  if (failed < 0) return;
  const std::string reason = broadcast_text(*comm, failed, message);
  const bool reason_is_input = broadcast_flag(*comm, failed, input_error);
  if (comm->rank() == failed) std::rethrow_exception(error);
  const std::string text = failed == 0 ? reason : "rank " + std::to_string(failed) + ": " + reason;
  if (reason_is_input) throw InputError(text);
  throw std::runtime_error(what + " failed on rank " + std::to_string(failed) + ": " + reason);
}

std::string partial_checkpoint_dir(const std::string& root, std::int64_t step) {
  return (fs::path(root) / ("." + checkpoint_name(step) + ".partial")).string();
}

std::string begin_checkpoint(const std::string& root, std::int64_t step, Communicator* comm) {
  const fs::path r(root);
  const fs::path partial = partial_checkpoint_dir(root, step);
  const bool lead = comm == nullptr || comm->rank() == 0;
  on_every_rank(comm, "creating " + partial.string(), [&] {
    if (!lead) return;
    std::error_code ec;
    fs::create_directories(r, ec);
    if (ec) throw InputError(root + ": cannot create directory: " + ec.message());
    fs::remove_all(partial, ec);  // a stale one from a crashed save
    if (!fs::create_directory(partial, ec) || ec) {
      throw InputError(partial.string() + ": cannot create directory: " + ec.message());
    }
  });
  return partial.string();
}

std::string commit_checkpoint(const std::string& root, std::int64_t step, const Json* manifest,
                              std::int64_t keep, Communicator* comm) {
  const fs::path r(root);
  const std::string name = checkpoint_name(step);
  const fs::path partial = partial_checkpoint_dir(root, step);
  const bool lead = comm == nullptr || comm->rank() == 0;
  try {
    on_every_rank(comm, "writing " + name + "'s manifest", [&] {
      if (!lead) return;
      const Json m = manifest != nullptr ? *manifest : make_manifest(partial, step);
      write_file_atomic((partial / kManifest).string(), m.dump(2) + "\n");
      fsync_dir(partial);
    });
  } catch (...) {
    std::error_code ec;
    if (lead) fs::remove_all(partial, ec);
    throw;
  }
  on_every_rank(comm, "committing " + name, [&] {
    if (!lead) return;
    commit_directory(partial, r / name);
    write_file_atomic((r / "latest").string(), name + "\n");
    prune(r, keep, r / name);
  });
  return (r / name).string();
}

std::string save_checkpoint(const std::string& root, std::int64_t step,
                            const std::function<void(const std::string& dir)>& write,
                            std::int64_t keep, Communicator* comm) {
  const fs::path partial = begin_checkpoint(root, step, comm);
  const bool lead = comm == nullptr || comm->rank() == 0;
  try {
    // Every rank its own files; then rank 0 the manifest over all of them.
    on_every_rank(comm, "writing the checkpoint's shards", [&] { write(partial.string()); });
  } catch (...) {
    std::error_code ec;
    if (lead) fs::remove_all(partial, ec);
    throw;
  }
  return commit_checkpoint(root, step, nullptr, keep, comm);
}

std::string latest_checkpoint(const std::string& root) {
  const fs::path latest = fs::path(root) / "latest";
  if (!fs::exists(latest)) {
    throw InputError(root + ": no checkpoint to resume from (no 'latest' file)");
  }
  std::string name = read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) {
    throw InputError(latest.string() + ": does not name a checkpoint directory");
  }
  const std::string dir = (fs::path(root) / name).string();
  if (!fs::is_directory(dir))
    throw InputError(latest.string() + " names " + dir + ", which is missing");
  verify_checkpoint(dir);
  return dir;
}

Json verify_checkpoint(const std::string& dir) {
  const fs::path manifest = fs::path(dir) / kManifest;
  if (!fs::exists(manifest)) {
    throw InputError(dir + ": incomplete checkpoint (no " + std::string(kManifest) + ")");
  }
  const Json m = Json::parse(read_file(manifest.string()), manifest.string());
  if (!m.is_object() || !m.contains("format") || m.at("format") != Json(kFormat) ||
      !m.contains("version") || m.at("version") != Json(kVersion)) {
    throw InputError(manifest.string() + ": not a mixpar checkpoint manifest (format " + kFormat +
                     " version " + std::to_string(kVersion) + ")");
  }
  try {
    check_manifest_semantics(m, fs::path(dir));
  } catch (const InputError& e) {  // a missing key or a wrong type, named with the file
    throw InputError(manifest.string() + ": " + e.what());
  }
  for (const Json& f : m.at("files").as_array()) {
    try {
      check_file(dir, f);
    } catch (const InputError& e) {
      const std::string what = e.what();
      if (what.starts_with(dir)) throw;  // names its file already
      throw InputError(manifest.string() + ": " + what);
    }
  }
  return m;
}

std::int64_t step_of_checkpoint_name(const std::string& name) {
  constexpr std::string_view prefix = "step-";
  if (!name.starts_with(prefix)) return -1;
  const std::string digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 18) return -1;
  std::int64_t step = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return -1;
    step = step * 10 + (ch - '0');
  }
  return step;
}

void check_trainer_state(const Json& st, const std::string& dir, std::int64_t run_steps) {
  const std::string name = fs::path(dir).filename().string();
  const std::int64_t step = st.at("step").as_int();
  if (step < 0 || step != step_of_checkpoint_name(name)) {
    throw InputError("step " + std::to_string(step) + " disagrees with the directory's name " +
                     name);
  }
  const std::int64_t t = st.at("optimizer_steps").as_int();
  if (t < 0 || t > step) {
    throw InputError("optimizer_steps " + std::to_string(t) + " is outside [0, step " +
                     std::to_string(step) + "]");
  }
  const double scale = st.at("scaler").at("scale").as_double();
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw InputError("loss scale " + std::to_string(scale) + " is not a positive number");
  }
  (void)loader_state_from_json(st.at("loader"));  // its step and epoch >= 0
  if (run_steps < step) {
    throw InputError("--steps " + std::to_string(run_steps) + " is below the checkpoint's step " +
                     std::to_string(step) + ": a resumed run continues to --steps (the total)");
  }
}

void check_fresh_checkpoint_root(const std::string& root) {
  std::error_code ec;
  if (root.empty() || !fs::is_directory(root, ec)) return;
  const bool has_latest = fs::exists(fs::path(root) / "latest", ec);
  const auto old = list_checkpoints(root);
  if (has_latest || !old.empty()) {
    const std::string what = !old.empty() ? old.back().second.filename().string() : "latest";
    throw InputError(root + " already holds checkpoints: pass --resume to continue that run, "
                     "or choose another --checkpoint-dir (found " + what + ")");
  }
}

CheckpointDirLock::CheckpointDirLock(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    throw InputError("--checkpoint-dir " + root + ": cannot create directory: " +
                     (ec ? ec.message() : std::string("not a directory")));
  }
  const std::string path = (fs::path(root) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InputError("--checkpoint-dir " + root + ": cannot write in it (" + path + ": " +
                     std::strerror(errno) + ")");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    try {
      holder = read_file(path);
    } catch (const std::exception&) {
    }
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      throw InputError("--checkpoint-dir " + root + " is in use by another run (" +
                       (holder.empty() ? std::string("holder unknown") : holder) + ")");
    }
    throw InputError("--checkpoint-dir " + root + ": cannot lock " + path + ": " +
                     std::strerror(err));
  }
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  char when[32] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::gmtime_r(&now, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  const std::string me = "train_gpt process " + std::to_string(::getpid()) + " on " + host +
                         ", since " + when + "\n";
  // The holder's name, for whoever finds the lock taken; the lock itself is the flock.
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError("--checkpoint-dir " + root + ": cannot write " + path + ": " +
                     std::strerror(errno));
  }
  // With the lock held no other run writes here: a `latest.tmp.PID.N` is what a run killed
  // while it wrote `latest` left (write_file_atomic's temporary), removed at this start.
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("latest.tmp.") && e.is_regular_file(ec)) fs::remove(e.path(), ec);
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace mixpar::ch08
