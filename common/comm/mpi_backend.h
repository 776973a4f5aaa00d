// The MPI backend: one process per rank (mpirun -np N), the same Communicator calls and the
// same traffic accounting as the local backend. By default reductions are done in rank order
// with the local backend's kernel, so results are bit-identical to it for every dtype; MPI's
// own MPI_Allreduce is one option away. A watchdog aborts a rank stuck in one call too long.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace mixpar {

// Watches one blocking call at a time from its own thread; a call still running after
// `seconds` gets on_timeout(description) once. The thread waits on a condition variable with
// a deadline: no polling.
class CallWatchdog {
 public:
  using Handler = std::function<void(const std::string& message)>;
  CallWatchdog(double seconds, Handler on_timeout);  // seconds <= 0: never fires
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // Marks a call as running until the guard is destroyed. what: "all_reduce(1024 x f32, sum)".
  class Guard {
   public:
    Guard(CallWatchdog* w, std::uint64_t id) : w_(w), id_(id) {}
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard();

   private:
    CallWatchdog* w_;
    std::uint64_t id_;
  };
  Guard watch(std::string what);

 private:
  void thread_main();
  using Clock = std::chrono::steady_clock;
  double seconds_;
  Handler on_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t next_id_ = 0;
  std::uint64_t active_ = 0;  // id of the call running, 0 when none
  std::string what_;
  Clock::time_point deadline_;
  bool stop_ = false;
  std::thread thread_;
};

enum class MpiReduction : std::uint8_t {
  // all_reduce / reduce_scatter: each rank receives its ring chunk from every rank
  // (MPI_Alltoallv), reduces it in rank order with the local backend's kernel (FP32
  // accumulation, one rounding), and the chunks are all-gathered (MPI_Allgatherv): the local
  // backend's bits, for every dtype, at the ring's 2(N-1)/N volume.
  kRankOrder,
  // MPI_Allreduce / MPI_Reduce_scatter_block on FP32 (f64 as double; 16- and 8-bit values
  // through an FP32 staging copy, rounded once): MPI chooses the order of the additions, so
  // sums may differ from the local backend's in the last bits. kMax propagates NaN (a
  // user-defined MPI_Op: MPI_MAX on floats need not).
  kMpi,
};

struct MpiOptions {
  MpiReduction reduction = MpiReduction::kRankOrder;
  // Before each collective the ranks all-gather a description of the call (one small
  // MPI_Allgather) and a disagreement becomes a CommError naming both calls on every rank.
  // Without it, mismatched collectives are what MPI makes of them: MPI_ERR_TRUNCATE when a
  // receive is too small, otherwise undefined behaviour (usually a hang: the watchdog's job).
  bool check_calls = true;
  double watchdog_seconds = 120.0;  // <= 0: no watchdog
  // What a watchdog timeout does. Default: print the message on stderr and MPI_Abort with
  // kExitWatchdog (4, util/errors.h), as a hung collective can only be left by killing the job.
  CallWatchdog::Handler on_watchdog;
  // This process's place in the run, named in every watchdog report after its world rank
  // ("dp 1, tp 0, pp 1"): set by the trainer once its grid is known; split() passes it on.
  std::string identity;
};

// RAII MPI_Init_thread / MPI_Finalize for a main(). Asks for MPI_THREAD_MULTIPLE (DDP's
// communication thread calls MPI while the main thread waits, and the watchdog may abort from
// its own thread); throws if the library gives less than MPI_THREAD_SERIALIZED.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int thread_level() const { return provided_; }

 private:
  int provided_ = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  // Over a duplicate of `comm` (our messages never mix with the caller's), errors returned to
  // us (MPI_ERRORS_RETURN) and turned into CommError naming the call, the rank and MPI's message.
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, MpiOptions opts = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  // send() copies the message and returns at once (MPI_Isend on the copy, completed later),
  // as the interface promises; recv() checks the size that arrived; sendrecv is MPI_Sendrecv.
  void send(const Tensor& t, int dst, int tag = 0) override;
  void recv(Tensor& t, int src, int tag = 0) override;
  void sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag = 0) override;

  void barrier() override;
  void broadcast(Tensor& t, int root) override;
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::kSum) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  // MPI_Alltoallv, after an MPI_Alltoall of the counts that checks each pair agrees.
  void all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts, Tensor& out,
                  std::span<const std::int64_t> recv_counts) override;
  // MPI_Allreduce of one MPI_CXX_BOOL with MPI_LOR; MPI_Bcast / MPI_Allgather of MPI_BYTEs.
  bool all_reduce_or(bool flag) override;
  void broadcast_bytes(std::span<std::byte> bytes, int root) override;
  void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  // A split with one colour; nullptr below MPI_THREAD_MULTIPLE (Communicator::dup).
  std::unique_ptr<Communicator> dup() override;

  MPI_Comm mpi_comm() const { return comm_; }
  const MpiOptions& options() const { return opts_; }
  // MpiOptions::identity, for this communicator and those split from it afterwards.
  void set_identity(std::string identity) { opts_.identity = std::move(identity); }
  // What a watchdog report says of a call: "world rank 3 (dp 1, tp 1, pp 0), rank 1 of 2 in
  // the group of world ranks {1, 3}, in all_gather(1 x f32)": the stopped process by its world
  // rank, its place in the grid and the call it is in, as NCCL's flight recorder names them.
  std::string watch_label(const std::string& what) const;

 private:
  struct Adopt {};
  MpiCommunicator(Adopt, MPI_Comm comm, MpiOptions opts);  // takes ownership of comm
  void init();
  void check(int rc, const std::string& what) const;
  void agree(const std::string& what, std::int64_t op, const Tensor* t, std::int64_t count,
             std::int64_t arg);
  void reap_sends(bool wait_all);
  void reduce_rank_order(const Tensor& in, Tensor& out, ReduceOp op, bool scatter_blocks);
  void reduce_with_mpi(Tensor& t, ReduceOp op, Tensor* out);
  CallWatchdog::Guard watch(const std::string& what);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MpiOptions opts_;
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0;
  std::string group_;  // ", rank r of n in the group of world ranks {..}" ("" for the world)
  std::int64_t calls_ = 0;  // collectives so far (the check names them by number)
  struct PendingSend {
    MPI_Request request;
    Tensor staging;
  };
  std::vector<PendingSend> pending_;
  std::unique_ptr<CallWatchdog> watchdog_;
};

}  // namespace mixpar
