// Gradient buckets and the thread that all-reduces them while backward still runs. Parameters
// are taken in reverse registration order (the order backward finishes them, which PyTorch's
// DDP assumes too) and packed into buckets of about 25 MiB. The registry keeps gradients in
// one flat buffer in registration order, so a bucket is one contiguous range of it, reduced in
// place (PyTorch's gradient_as_bucket_view): no copy for FP32 gradients.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "trace/chrome_trace.h"
#include "ch04_ddp/ring_allreduce.h"
#include "comm/communicator.h"
#include "model/gpt_params.h"

namespace mixpar::ch04 {

struct Bucket {
  std::int64_t begin = 0, count = 0;  // elements [begin, begin + count) of the flat gradients
  std::vector<std::size_t> entries;   // registry entries, in reverse registration order
};

// Buckets over `entries` (laid out back to back in registration order) in reverse order. A
// bucket closes once it holds at least cap_bytes of `dtype` (PyTorch's bucket_cap_mb rule), so
// a parameter larger than the cap sits alone in its bucket; cap_bytes 0: one per parameter.
// close_after (optional): a bucket also closes after entry k when close_after(k) is true,
// whatever its size (chapter 5's ZeRO-3: one bucket per block, the unit it gathers).
using BucketBoundary = std::function<bool(std::size_t entry)>;
std::vector<Bucket> make_buckets(std::span<const ParamEntry> entries, DType dtype,
                                 std::size_t cap_bytes, const BucketBoundary& close_after = {});

struct ReducerConfig {
  std::size_t bucket_cap_bytes = std::size_t{25} << 20;  // PyTorch's bucket_cap_mb = 25
  BucketBoundary close_after;  // make_buckets' extra boundaries (empty: the cap alone)
  AllReduceAlgo algo = AllReduceAlgo::kBackend;          // or the hand-built ring / naive
  RingOptions ring;                                      // for kRing and kNaive
  // 16-bit gradients are copied into an FP32 bucket (kCommBuffers: 4 bytes per parameter),
  // summed and averaged there, and rounded once back: an average of values that fit fits.
  // false: reduced in their own dtype, where the SUM of N scaled gradients can overflow before
  // the division by N (the fp16-reduce failure mode). FP32 gradients are reduced in place.
  bool reduce_in_fp32 = true;
  // true: a bucket's FP32 staging copy exists only while the bucket is in flight (allocated
  // when its reduction starts, released when its result is back in the gradients), so the
  // ledger holds the in-flight buckets' staging instead of 4 bytes for every parameter
  // (chapter 5's ZeRO-2). false: allocated once, kept (DDP's persistent buckets).
  bool release_staging = false;
  // A communication thread reduces each bucket as soon as it is complete. false: every bucket
  // is reduced on the caller's thread in finish() (the no-overlap baseline).
  bool overlap = true;
  // What is done with bucket i once its gradients are final: empty, all-reduce `work` (the
  // FP32 staging copy, or the gradients themselves) and divide it by `divisor`. Chapter 5's
  // ZeRO reduce-scatters instead, leaving each rank the mean of its own shard.
  std::function<void(std::size_t bucket, Tensor& work, double divisor)> bucket_op;
};

// One rank's reducer. The communicator is used by the communication thread between begin()
// and finish() only: the caller must not use it in between.
class BucketReducer {
 public:
  BucketReducer(Communicator& comm, const ParamRegistry& registry, ReducerConfig config);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // Opens a synchronising backward: every parameter pending; the summed gradients will be
  // multiplied by 1/divisor (N ranks x micro-batches: the mean over the global batch).
  void begin(double divisor);
  // Registry entry `entry` has its final gradient (backward thread). A bucket whose entries are
  // all final is handed to the communication thread, strictly in bucket order, so that every
  // rank issues the same collectives in the same order whatever its timing.
  void mark_ready(std::size_t entry);
  // Marks every entry not yet marked, in reverse registration order (the post-backward path),
  // waits until every bucket is reduced and returns the seconds the caller waited. Rethrows a
  // failure of the communication thread.
  double finish();
  // Blocks until bucket i is reduced, or rethrows a failure (tests prove overlap with it).
  void wait_for_bucket(std::size_t i);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Buckets whose entries were all marked before the last finish(): handed to the
  // communication thread while backward was still running.
  std::size_t ready_before_finish() const { return ready_before_finish_; }
  // Busy seconds of the communication since the last call, and its spans.
  double take_comm_seconds();
  std::vector<TraceSpan> take_spans();

 private:
  void thread_main();
  void reduce_bucket(std::size_t i);
  void advance_launchable();  // with mu_ held
  void rethrow_if_failed();   // with mu_ held

  Communicator& comm_;
  ReducerConfig config_;
  Tensor flat_grads_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // by registry entry
  std::vector<Tensor> staging_;         // FP32 bucket buffers (16-bit gradients only)
  MemoryLedger* ledger_;                // the rank's: staging copies made by the thread go there
  double divisor_ = 1.0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<bool> marked_;       // by entry
  std::vector<int> pending_;       // entries still to be marked, by bucket
  std::size_t launchable_ = 0;     // buckets [0, launchable_) are complete
  std::size_t done_ = 0;           // buckets [0, done_) are reduced
  std::size_t ready_before_finish_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  double comm_seconds_ = 0;
  std::vector<TraceSpan> spans_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace mixpar::ch04
