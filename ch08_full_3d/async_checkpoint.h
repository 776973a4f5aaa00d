// Checkpoints written in the background (--checkpoint-async), as torch.distributed.checkpoint's
// async_save, Megatron's asynchronous save and DeepSpeed's FastPersist do it (docs/REFERENCE.md,
// "Distributed checkpoints"): the step stops only to copy what it must into a staging buffer
// in host memory (charged to the rank's memory ledger), a writer thread of this rank writes
// the copy into the checkpoint's hidden partial directory, and training goes on. The commit
// is checkpoint.h's, unchanged: once every rank's writer is done, rank 0 writes the manifest
// over the files they report, renames the directory and moves `latest`. A kill at any moment
// leaves the last committed checkpoint as it was.
//
// The writer thread never touches the communicator (the local backend's ranks are threads,
// one communicator state each, and MPI's collectives are ordered per communicator): the ranks'
// main threads ask each other, at the end of every step while a write is in flight, whether
// every writer is done (one all_reduce_or), and commit together when they are.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "tensor/ledger.h"
#include "util/json.h"

namespace mixpar::ch08 {

// What a background write can ask of the thread that owns it: whether to stop (the run failed,
// the writer is being abandoned), and a wait that stopping ends too, so that a write blocked in
// a test hook never keeps the run from exiting.
class WriteControl {
 public:
  bool cancelled() const { return cancelled_.load(); }
  // Blocks until ready() is true (re-checked whenever wake() is called) or the write is
  // cancelled; returns ready().
  bool wait_until(const std::function<bool()>& ready) const;
  void wake() const;
  void cancel();
  void reset() { cancelled_.store(false); }  // before the next write

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

// One checkpoint's files as this rank stages them: each function writes one file into dir
// (atomically, io/atomic_file.h) from the staged copy and returns its name; the writer calls
// them in order, checking between them whether to stop. bytes: the staging buffer's size (the
// copy of the state this rank writes), as the ledger billed it.
using CheckpointFileWriter =
    std::function<std::string(const std::string& dir, const WriteControl& control)>;
struct StagedCheckpoint {
  std::vector<CheckpointFileWriter> files;
  std::size_t bytes = 0;
};

// Per checkpoint, what the run spent on it: blocked_s = wait_s + staging_s + commit_s, the
// time the training loop stood still for it; write_s the writer thread's time in the
// background (its files written, synced and checksummed).
struct CheckpointTimes {
  std::int64_t step = 0;
  std::string path;          // the committed directory
  double wait_s = 0;         // waiting for the previous checkpoint's write still running
  std::int64_t waited_for = -1;  // that checkpoint's step (-1: none was running)
  double staging_s = 0;      // copying the state into the staging buffer
  double commit_s = 0;       // the ranks agreeing, rank 0's manifest, rename and `latest`
  double write_s = 0;        // the background write (the slowest rank's, rank 0's view: its own)
  std::size_t staged_bytes = 0;
  double blocked_s() const { return wait_s + staging_s + commit_s; }
};

// The fault injections of the crash tests (tests/ch08/async_checkpoint_test.cpp), read from the
// environment by the writer: MIXPAR_KILL_DURING_CHECKPOINT_STAGING=K kills the process (SIGKILL)
// halfway through staging step K's checkpoint, MIXPAR_KILL_DURING_CHECKPOINT_WRITE=K after
// the writer of step K wrote its first file, MIXPAR_CHECKPOINT_WRITE_ENOSPC=K makes that
// writer fail as a full disk does (write(2)'s ENOSPC).
bool fault_asked(const char* variable, std::int64_t step);

// One rank's background checkpoints. Not thread-safe: the rank's main thread calls it.
class AsyncCheckpoints {
 public:
  // comm: the world (null: a single device); every rank constructs one and calls save, poll
  // and finish at the same points (they are collective).
  AsyncCheckpoints(std::string root, std::int64_t keep, Communicator* comm);
  // Cancels a write still running, joins the writer and, rank 0, removes its partial directory:
  // what a run that fails part-way leaves (abandon()'s, without its report).
  ~AsyncCheckpoints();
  AsyncCheckpoints(const AsyncCheckpoints&) = delete;
  AsyncCheckpoints& operator=(const AsyncCheckpoints&) = delete;

  // Collective. The checkpoint of `step`: first the previous one (waiting for its write if it
  // still runs, then committing it; returned when it committed here), then a fresh partial
  // directory, stage() on this thread (the state copied: the optimizer may step once it
  // returns) and the copy handed to the writer. on_wait(previous step) is called, on rank 0,
  // before waiting for a write still running.
  std::optional<CheckpointTimes> save(std::int64_t step,
                                      const std::function<StagedCheckpoint()>& stage,
                                      const std::function<void(std::int64_t)>& on_wait = {});
  // Collective, after every step: commits the write in flight once every rank's writer is
  // done (returning its times), else returns nothing at once. A writer's failure is thrown
  // here, on every rank (an InputError naming the step it belongs to; the previous checkpoint
  // and `latest` stay).
  std::optional<CheckpointTimes> poll();
  // Collective, at the end of a run: waits for the write in flight and commits it.
  std::optional<CheckpointTimes> finish();
  // Not collective: stops a write in flight (cancelled, joined) and, on rank 0, removes its
  // partial directory. Returns what it did, for the run's error report ("" when nothing was
  // in flight).
  std::string abandon();

  bool in_flight() const { return pending_.has_value(); }
  std::int64_t in_flight_step() const { return pending_ ? pending_->times.step : -1; }
  // Wakes a write waiting in WriteControl::wait_until (tests release a blocked writer so).
  void wake_writer() const { control_.wake(); }

 private:
  struct Pending {
    CheckpointTimes times;
    std::string partial;
  };
  void start_writer(StagedCheckpoint staged, std::int64_t step);
  bool writer_running() const { return thread_.joinable() && !done_.load(); }
  CheckpointTimes commit();  // collective: the ranks' outcomes, then rank 0 commits

  std::string root_;
  std::int64_t keep_;
  Communicator* comm_;
  MemoryLedger* ledger_;  // the rank's: the writer thread bills what it allocates there
  std::optional<Pending> pending_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  WriteControl control_;
  // Set by the writer thread before done_: read only after it.
  std::exception_ptr error_;
  Json entries_;  // the manifest's lines of the files this rank wrote
  double write_s_ = 0;
};

}  // namespace mixpar::ch08
