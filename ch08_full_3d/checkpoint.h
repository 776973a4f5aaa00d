// Checkpoint directories that are complete or absent, never half-written. A save fills a hidden
// `.step-K.partial/` (each file atomic), writes manifest.json last (size and checksum of every
// file), renames the directory to `step-K/` and only then points `latest` at it: a crash or an
// error at any moment leaves the previous checkpoint and `latest` as they were.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "comm/communicator.h"
#include "util/json.h"

namespace mixpar::ch08 {

// "step-00000012"
std::string checkpoint_name(std::int64_t step);

// Calls write(dir) to fill a fresh partial directory with the checkpoint's files, writes their
// manifest, commits the directory as root/checkpoint_name(step) (replacing one of that name),
// updates root/latest and removes all but the newest `keep` checkpoints. Returns the path. If
// write throws, the partial directory is removed and the exception propagates.
// comm: collective over its ranks, which share root (threads, or processes on one file
// system): rank 0 makes the partial directory, every rank's write() adds the files it holds,
// rank 0 writes the manifest over all of them and commits. A failure on any rank fails the
// save on every rank (an InputError naming the step on the others), the previous checkpoint
// and `latest` left as they were.
std::string save_checkpoint(const std::string& root, std::int64_t step,
                            const std::function<void(const std::string& dir)>& write,
                            std::int64_t keep, Communicator* comm = nullptr);

// save_checkpoint's three parts, for a save whose files are written elsewhere in between (a
// background writer, async_checkpoint.h); each collective over comm like save_checkpoint.
// The hidden directory a save of `step` fills (root/.step-K.partial).
std::string partial_checkpoint_dir(const std::string& root, std::int64_t step);
// Rank 0 makes a fresh partial directory (removing a stale one) and every rank learns whether
// it could. Returns its path.
std::string begin_checkpoint(const std::string& root, std::int64_t step, Communicator* comm);
// Rank 0 writes the manifest (`manifest`, or one made over the partial directory's files when
// null), commits the directory as root/checkpoint_name(step), moves `latest` and prunes to
// `keep`. On a failure the partial directory is removed. Returns the committed path.
std::string commit_checkpoint(const std::string& root, std::int64_t step, const Json* manifest,
                              std::int64_t keep, Communicator* comm);
// One file's line of a manifest: {"name", "bytes", "fnv1a64"} of dir/name as it is on disk.
Json manifest_entry(const std::string& dir, const std::string& name);
// The manifest of step over these entries (any order: sorted by name, as the manifest of a
// directory lists them), the same bytes whoever gathered them.
Json manifest_of(Json files, std::int64_t step);

// Collective over comm (null: f alone): runs f on this rank. When f failed anywhere, the
// lowest failing rank rethrows its own error and every other rank throws that rank's reason
// ("rank 3: ...", an InputError when it was one), so every rank's message is the same. So a checkpoint that one rank cannot read (a
// piece it needs is missing) stops every rank with one line that says why, whichever rank
// prints it, instead of leaving the others waiting in the next collective.
void on_every_rank(Communicator* comm, const std::string& what, const std::function<void()>& f);

// The directory root/latest names, after verify_checkpoint. InputError when there is none.
std::string latest_checkpoint(const std::string& root);

// InputError naming the file unless dir/manifest.json exists, parses, and every file it lists
// has the recorded size and FNV-1a 64 checksum (a truncated or altered file), and no file is
// missing. The manifest must also make sense on its own: its step a whole number >= 0 that
// agrees with the directory's name, a non-empty list of files with names, sizes and
// checksums (a manifest regenerated over edited state passes the checksums, not these).
// Returns the manifest.
Json verify_checkpoint(const std::string& dir);

// FNV-1a 64 of a file's bytes, as 16 hex digits (streamed: checkpoints can be gigabytes).
std::string file_checksum(const std::string& path);

// A trainer_state.json's own numbers, before any of them is used (InputError, without the
// file's name: the caller adds it): its step a whole number that agrees with the name of the
// directory `dir`, AdamW's t within [0, step] (skipped steps do not count), a positive finite
// loss scale, a loader position >= 0, and run_steps (this run's --steps, the total) not below
// the step.
void check_trainer_state(const Json& state, const std::string& dir, std::int64_t run_steps);

// The step a checkpoint directory's name says ("step-00000012" -> 12); -1 for any other name.
std::int64_t step_of_checkpoint_name(const std::string& name);

// A fresh run (no --resume) into root: InputError unless root holds no checkpoint of another
// run (no `latest`, no step-K directory). Pruning would otherwise delete that run's
// checkpoints, and `latest` would move back and forth between the two.
void check_fresh_checkpoint_root(const std::string& root);

// An exclusive lock on root/.lock (flock(2)), held while the object lives: a second run
// started into the same directory fails at once, naming the holder (process id, host and
// start time, which the holder writes into the lock file), instead of both failing at their
// first save. Creates root if needed, so an unwritable directory is found before step 1.
// The kernel drops the lock when the holder exits, even by kill -9: a stale lock file is
// never an obstacle.
class CheckpointDirLock {
 public:
  explicit CheckpointDirLock(const std::string& root);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace mixpar::ch08
