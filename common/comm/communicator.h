// Communicator: the one door every byte between ranks goes through. Backends (local threads,
// MPI, NCCL) implement the same calls, and every call is recorded per rank
// (operation, bytes sent, bytes received) so chapters can assert communication volume.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"
#include "util/errors.h"

namespace mixpar {

enum class ReduceOp : std::uint8_t { kSum, kMax };
std::string_view reduce_op_name(ReduceOp op);

// Raised on every rank of a world when the ranks disagree on a collective or a message, when
// they deadlock, when the watchdog fires, or when another rank failed (then the message names
// that rank and its error). Reports name ranks by their rank in the whole world.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The CommError of a watchdog that fired: a rank waited in one call longer than its limit.
// Marked so that run_main exits with kExitWatchdog (util/errors.h), not as an internal error.
class CommWatchdogTimeout : public CommError, public WatchdogTimeoutMark {
 public:
  using CommError::CommError;
};

// A watchdog's limit in seconds: <= 0 turns it off; otherwise at most kMaxWatchdogSeconds
// (about 11.6 days; a deadline past 2^63 ns of the steady clock would overflow and fire at
// once). NaN or a larger limit is an InputError naming `what`.
inline constexpr double kMaxWatchdogSeconds = 1e6;
void check_watchdog_seconds(const std::string& what, double seconds);

// Per-rank traffic accounting. Collectives are charged with the per-rank volume of the
// bandwidth-optimal (ring) algorithm, whatever a backend does internally, so formulas such as
// "all-reduce sends 2(N-1)/N of the buffer" hold for every backend (B = buffer bytes):
//   all_reduce      what the ring of all_reduce_traffic() moves: 2(N-1)/N * B sent and
//                   received when N divides the element count, 2(N-1) * B summed over ranks
//   reduce_scatter  sent = received = (N-1)/N * input bytes
//   all_gather      sent = received = (N-1)/N * output bytes
//   all_to_all      sent = the bytes of the blocks for the other ranks, received = the bytes of
//                   the blocks from them (a rank's own block never leaves it)
//   broadcast       root sends B, every other rank receives B (nothing moves when N = 1)
//   send / recv     the message bytes on the side that moves them; sendrecv records both
//                   (and so does sendrecv_reduce, recorded as "sendrecv")
//   barrier, split  a call, no bytes (dup is recorded as the split it is)
//   all_reduce_or   what all_reduce of one one-byte element charges (all_reduce_traffic)
//   broadcast_bytes, all_gather_bytes   as broadcast and all_gather, B = the bytes given
// The op names recorded are exactly the method names above ("all_reduce", "sendrecv", ...).
// A backend built from send/recv (chapter 4's ring) is simply charged for its sends and recvs.
struct TrafficTotals {
  std::int64_t calls = 0;
  std::size_t bytes_sent = 0;
  std::size_t bytes_received = 0;
};

class TrafficRecorder {
 public:
  void record(const std::string& op, std::size_t bytes_sent, std::size_t bytes_received);
  TrafficTotals totals(const std::string& op) const;  // zeros if the op never ran
  TrafficTotals total() const;                          // over all ops
  std::map<std::string, TrafficTotals> by_op() const;
  void reset();

 private:
  mutable std::mutex mu_;
  std::map<std::string, TrafficTotals> by_op_;
};

// How a ring splits a buffer of `numel` elements into `parts` chunks: as evenly as possible,
// the first numel % parts chunks one element longer. Chapter 4's hand-built ring uses the
// same split, so its recorded traffic equals all_reduce's to the byte.
struct ChunkRange {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};
ChunkRange ring_chunk(std::int64_t numel, int parts, int index);

// What one all_reduce of `numel` elements charges to `rank` of `size`: the ring's bytes.
// Rank r sends to r+1; reduce-scatter step s (s = 0..N-2) sends chunk r-s and receives chunk
// r-s-1, leaving rank r owning chunk r+1; all-gather step s sends chunk r+1-s and receives
// chunk r-s (all mod N). So rank r sends every chunk twice except chunks r+1 and r+2 (once
// each) and receives every chunk twice except chunks r and r+1: exactly 2(N-1)/N of the
// buffer when N divides numel, less than two elements away from it otherwise, and always
// exactly 2(N-1) buffers summed over the ranks.
TrafficTotals all_reduce_traffic(std::int64_t numel, DType dtype, int size, int rank);
// The same for elements of `element_bytes` bytes (all_reduce_or: one element of one byte).
TrafficTotals all_reduce_traffic(std::int64_t numel, std::size_t element_bytes, int size,
                                 int rank);

// What one all_to_all charges to `rank`: the elements of the blocks to and from the other
// ranks, times the element size. Also checks the call's shape (every backend calls it first):
// std::invalid_argument unless both count lists have `size` non-negative entries and in and
// out hold their sums.
TrafficTotals all_to_all_traffic(std::span<const std::int64_t> send_counts,
                                 std::span<const std::int64_t> recv_counts, std::int64_t in_numel,
                                 std::int64_t out_numel, DType dtype, int size, int rank);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"

  // Point to point. send() may return before the receiver has the data (buffered, like an
  // eager MPI send); recv() blocks until a message from src with this tag arrives. Messages
  // between a pair with the same tag arrive in order. Element counts and dtypes must match
  // (shapes may differ); a mismatch is a CommError naming both ranks.
  virtual void send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  // Whether send() may wait until the receiver takes the message (NCCL's sends, the local
  // backend's synchronous mode) instead of returning once it is queued (MPI's Isend of a
  // staged copy, the local default): an order of sends and receives that relies on
  // buffering then deadlocks, and chapter 7's pre-flight check plays a plan accordingly.
  virtual bool sends_wait_for_receiver() const { return false; }
  // One step of a ring: send to dst and receive from src at once (safe for every backend).
  // Returns when recv_t holds the message and send_t may be reused, which can mean once dst
  // has received (MPI_Sendrecv's blocking semantics); the two buffers must not overlap.
  virtual void sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag = 0) = 0;
  // One reduce-scatter hop of a ring, NCCL's recvReduceSend: send send_t to dst and set
  //   out = (src's message) op own
  // with local::combine_elements' arithmetic (FP32 accumulation, double with f64, one rounding
  // into out's dtype). recv_t says what src sends (count and dtype) and is where this default,
  // sendrecv then combine, lands it; a backend that can read the sender's memory (the local
  // one) adds straight out of the message in one pass and leaves recv_t untouched.
  // Host tensors; own, out and recv_t have the same numel; out must not overlap send_t.
  // Traffic: recorded as the sendrecv it is.
  virtual void sendrecv_reduce(const Tensor& send_t, int dst, Tensor& recv_t, int src,
                               const Tensor& own, Tensor& out, ReduceOp op, int tag = 0);

  // Collectives: every rank of the group calls them in the same order with the same sizes
  // and dtypes; a mismatch is a CommError naming the ranks and their calls.
  virtual void barrier() = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // In place. Reduction order is fixed: rank 0, 1, ..., N-1. Sums of 16- and 8-bit types are
  // accumulated in FP32 and rounded once (an overflow becomes inf, or NaN for e4m3: never
  // silently clamped); f32 sums in FP32, f64 in double. kMax propagates NaN. Results are
  // identical on every rank and run to run.
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  // in: size()*k elements, out: k elements = reduction over ranks of block rank() of `in`.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::kSum) = 0;
  // in: k elements, out: size()*k elements, block r coming from rank r.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // All-to-all with variable counts (MPI_Alltoallv): in holds, one after the other, the block
  // for rank 0 (send_counts[0] elements), for rank 1, ...; out receives, in rank order,
  // recv_counts[p] elements from rank p. Both spans have size() entries; recv_counts[p] must
  // equal rank p's send_counts[rank()] (expert parallelism exchanges the counts first, with
  // an all_to_all of one count per rank, then the tokens), else a CommError (local, MPI) or an
  // undefined result (NCCL, which cannot check). Counts may be zero; in and out have the same
  // dtype and exactly the counts' sums of elements.
  virtual void all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts, Tensor& out,
                          std::span<const std::int64_t> recv_counts) = 0;

  // Control collectives: flags and bytes in host memory, with no dtype and no arithmetic but a
  // logical OR, so a flag travels as one byte and a text as its bytes (comm/control.h builds
  // its typed messages on them; numbers never stand in for either). Pure virtual, so that no
  // backend and no wrapper of one can fall back to an encoding it did not choose.
  // Whether `flag` is true on any rank of the group: the OR of one byte from each.
  virtual bool all_reduce_or(bool flag) = 0;
  // Root's bytes on every rank; every rank passes the same number of bytes.
  virtual void broadcast_bytes(std::span<std::byte> bytes, int root) = 0;
  // out: size() blocks of in.size() bytes, block r coming from rank r.
  virtual void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) = 0;

  // Collective over this communicator: ranks with the same color form a new group, ordered
  // by (key, parent rank). Used for the data / tensor / pipeline groups of chapter 8.
  // A negative color joins no group and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Collective over this communicator: the same ranks in the same order, as a communicator a
  // second thread of this rank may call while the first is in a call of any other group (a
  // gradient sync's buckets during a tp all-reduce): MPI_Comm_dup. Its messages never mix with
  // this one's. nullptr on every rank where the backend cannot run two threads' calls at once:
  // the caller then keeps its calls on one thread. So by default, and on NCCL, whose
  // communicators used at once must see their operations submitted in the same order on every
  // rank (its user guide, "Using multiple NCCL communicators concurrently"), which two
  // threads per rank do not promise. MPI gives one under MPI_THREAD_MULTIPLE; the local
  // backend puts it on a lane of its own.
  virtual std::unique_ptr<Communicator> dup() { return nullptr; }

  // Virtual so that a decorator (comm/timed_communicator.h) reports its inner backend's record.
  virtual TrafficRecorder& traffic() { return traffic_; }
  virtual const TrafficRecorder& traffic() const { return traffic_; }

 protected:
  // sendrecv_reduce's preconditions on its receiving side; throws std::invalid_argument.
  static void check_reduce_hop(const Tensor& recv_t, const Tensor& own, const Tensor& out);

  TrafficRecorder traffic_;
};

}  // namespace mixpar
