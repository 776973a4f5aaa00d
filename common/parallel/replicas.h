// Replicas that start equal and stay equal. Data parallelism trains one model on N copies:
// they must start from the same weights (rank 0's broadcast, or one seed trusted and then
// checked) and, if anything nondeterministic or a rank that skipped a step makes them part,
// the run must say so instead of logging rank 0's model while N different ones train.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar {

enum class InitSync : std::uint8_t {
  kBroadcast,  // rank 0's weights are broadcast to every rank (what PyTorch's DDP constructor does)
  kSameSeed,   // every rank initialised from one global seed; nothing is sent, the check verifies
  kNone,       // nothing at all: the different-init failure mode
};

// A hash of every rank's weights. ok: all equal.
struct ReplicaCheck {
  bool ok = true;
  std::vector<std::uint64_t> hashes;  // by rank of the group
  std::string message;  // "replica check: ranks 1, 3 hold weights different from rank 0's"
};

class ReplicaMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// FNV-1a over the tensor's bytes, 8 at a time: equal bits, equal hash (CPU tensors).
std::uint64_t weights_hash(const Tensor& t);

// Collective over `group` (the replicas: a dp group): every rank's hash of `weights`, compared.
// Ranks in the message are ranks of the group.
ReplicaCheck check_replicas(Communicator& group, const Tensor& weights);
// check_replicas, throwing ReplicaMismatch with its message.
void verify_replicas(Communicator& group, const Tensor& weights);

// Collective over `group`: makes `weights` equal as `how` says (kBroadcast: rank 0's sent to
// all, in place). Checking is the caller's (verify_replicas).
void sync_initial_weights(Communicator& group, Tensor weights, InitSync how);

}  // namespace mixpar
