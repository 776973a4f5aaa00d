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

// The directory root/latest names, after verify_checkpoint. InputError when there is none.
std::string latest_checkpoint(const std::string& root);

// InputError naming the file unless dir/manifest.json exists, parses, and every file it lists
// has the recorded size and FNV-1a 64 checksum (a truncated or altered file), and no file is
// missing. Returns the manifest.
Json verify_checkpoint(const std::string& dir);

// FNV-1a 64 of a file's bytes, as 16 hex digits (streamed: checkpoints can be gigabytes).
std::string file_checksum(const std::string& path);

}  // namespace mixpar::ch08
