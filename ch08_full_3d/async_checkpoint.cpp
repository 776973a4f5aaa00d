// The background writer and the commit protocol of async_checkpoint.h. The order of a save is
// what makes it crash-safe: the partial directory exists before any file, each file is
// written atomically, the manifest (over every rank's files) only after every writer is done,
// and `latest` moves only after the directory is renamed; a kill between any two of these
// leaves `latest` on the last committed checkpoint, and the next save of the step replaces
// the debris.
#include "async_checkpoint.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "checkpoint.h"
#include "comm/control.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A writer's failure, named with the step it belongs to: it surfaces steps later, at a poll.
std::exception_ptr named_failure(std::int64_t step, const std::exception_ptr& error) {
  const std::string head = "checkpoint of step " + std::to_string(step) +
                           " (written in the background): ";
  const std::string tail = "; the last committed checkpoint stays";
  try {
    std::rethrow_exception(error);
  } catch (const InputError& e) {
    return std::make_exception_ptr(InputError(head + e.what() + tail));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(head + e.what() + tail));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error(head + "unknown error" + tail));
  }
}

}  // namespace

bool fault_asked(const char* variable, std::int64_t step) {
  const char* v = std::getenv(variable);
  return v != nullptr && std::to_string(step) == v;
}

bool WriteControl::wait_until(const std::function<bool()>& ready) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return cancelled_.load() || ready(); });
  return ready();
}

void WriteControl::wake() const {
  // Under the mutex: a waiter between its check and its sleep cannot miss the wake-up.
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void WriteControl::cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.store(true);
  }
  cv_.notify_all();
}

AsyncCheckpoints::AsyncCheckpoints(std::string root, std::int64_t keep, Communicator* comm)
    : root_(std::move(root)), keep_(keep), comm_(comm), ledger_(&current_ledger()) {}

AsyncCheckpoints::~AsyncCheckpoints() {
  try {
    abandon();
  } catch (...) {
    // A directory that cannot be removed is debris the next save of its step replaces.
  }
}

void AsyncCheckpoints::start_writer(StagedCheckpoint staged, std::int64_t step) {
  done_.store(false);
  error_ = nullptr;
  entries_ = Json::array();
  write_s_ = 0;
  control_.reset();
  const std::string dir = pending_->partial;
  thread_ = std::thread([this, staged = std::move(staged), dir, step]() mutable {
    // What the writer allocates (write_pieces' buffers) is this rank's, in host memory.
    LedgerScope ledger(*ledger_);
    HostMemoryScope host;
    const Clock::time_point t0 = Clock::now();
    try {
      for (std::size_t i = 0; i < staged.files.size(); ++i) {
        if (control_.cancelled()) throw std::runtime_error("stopped: the run is ending");
        if (i == 1 && fault_asked("MIXPAR_CHECKPOINT_WRITE_ENOSPC", step)) {
          throw InputError(dir + ": write failed: " + std::strerror(ENOSPC) +
                           " (MIXPAR_CHECKPOINT_WRITE_ENOSPC)");
        }
        const std::string name = staged.files[i](dir, control_);
        // The manifest's line, read back from the disk as a synchronous save's manifest does.
        entries_.push_back(manifest_entry(dir, name));
        if (i == 0 && fault_asked("MIXPAR_KILL_DURING_CHECKPOINT_WRITE", step)) ::raise(SIGKILL);
      }
    } catch (...) {
      error_ = named_failure(step, std::current_exception());
    }
    staged.files.clear();  // the staged copy, freed before the write counts as done
    write_s_ = seconds_since(t0);
    done_.store(true);
  });
}

std::optional<CheckpointTimes> AsyncCheckpoints::save(
    std::int64_t step, const std::function<StagedCheckpoint()>& stage,
    const std::function<void(std::int64_t)>& on_wait) {
  const bool lead = comm_ == nullptr || comm_->rank() == 0;
  std::optional<CheckpointTimes> previous;
  double wait_s = 0;
  std::int64_t waited_for = -1;
  if (pending_) {
    // The one staging buffer is still being written: this step waits for it (and says so).
    const Clock::time_point t0 = Clock::now();
    if (writer_running()) {
      waited_for = pending_->times.step;
      if (lead && on_wait) on_wait(waited_for);
    }
    if (thread_.joinable()) thread_.join();
    wait_s = seconds_since(t0);
    previous = commit();
  }
  const Clock::time_point t1 = Clock::now();
  const std::string partial = begin_checkpoint(root_, step, comm_);
  pending_ = Pending{CheckpointTimes{}, partial};
  pending_->times.step = step;
  StagedCheckpoint staged;
  try {
    on_every_rank(comm_, "staging the checkpoint of step " + std::to_string(step),
                  [&] { staged = stage(); });
  } catch (...) {
    std::error_code ec;
    if (lead) fs::remove_all(partial, ec);
    pending_.reset();
    throw;
  }
  CheckpointTimes& t = pending_->times;
  t.staging_s = seconds_since(t1);
  t.wait_s = wait_s;
  t.waited_for = waited_for;
  t.staged_bytes = staged.bytes;
  start_writer(std::move(staged), step);
  return previous;
}

std::optional<CheckpointTimes> AsyncCheckpoints::poll() {
  if (!pending_) return std::nullopt;
  const bool running = writer_running();
  if (comm_ != nullptr ? any_true(*comm_, running) : running) return std::nullopt;
  return commit();
}

std::optional<CheckpointTimes> AsyncCheckpoints::finish() {
  if (!pending_) return std::nullopt;
  if (thread_.joinable()) thread_.join();
  return commit();
}

CheckpointTimes AsyncCheckpoints::commit() {
  if (thread_.joinable()) thread_.join();
  const Clock::time_point t0 = Clock::now();
  Pending p = std::move(*pending_);
  pending_.reset();
  const bool lead = comm_ == nullptr || comm_->rank() == 0;
  const std::int64_t step = p.times.step;
  try {
    // A writer that failed anywhere fails the save everywhere, with the lowest failing rank's
    // reason (which names the step).
    on_every_rank(comm_, "writing the checkpoint of step " + std::to_string(step), [&] {
      if (error_) std::rethrow_exception(error_);
    });
  } catch (...) {
    std::error_code ec;
    if (lead) fs::remove_all(p.partial, ec);
    throw;
  }
  // Every rank's manifest lines to rank 0, which lists them as a manifest of the directory.
  Json files = Json::array();
  if (comm_ != nullptr) {
    for (const std::string& text : gather_text(*comm_, entries_.dump())) {
      const Json lines = Json::parse(text, "checkpoint manifest lines");
      for (const Json& f : lines.as_array()) files.push_back(f);
    }
  } else {
    files = entries_;
  }
  const Json manifest = manifest_of(std::move(files), step);
  p.times.path = commit_checkpoint(root_, step, lead ? &manifest : nullptr, keep_, comm_);
  p.times.commit_s = seconds_since(t0);
  p.times.write_s = write_s_;
  return p.times;
}

std::string AsyncCheckpoints::abandon() {
  control_.cancel();
  if (thread_.joinable()) thread_.join();
  if (!pending_) return "";
  const bool lead = comm_ == nullptr || comm_->rank() == 0;
  const std::string report = "checkpoint of step " + std::to_string(pending_->times.step) +
                             ": its background write was stopped and " + pending_->partial +
                             " removed; the last committed checkpoint stays";
  std::error_code ec;
  if (lead) fs::remove_all(pending_->partial, ec);
  pending_.reset();
  return lead ? report : "";
}

}  // namespace mixpar::ch08
