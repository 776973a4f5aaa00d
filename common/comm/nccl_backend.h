// The NCCL backend: one GPU per rank, device tensors only, NCCL's own collectives, the same
// traffic accounting as every backend. Bootstrapped through another Communicator (rank 0's
// ncclGetUniqueId broadcast by it: MPI_Bcast under MPI) or through a file on a shared path.
// Every NCCL and CUDA call is checked and reported with its file and line.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace mixpar {

// CUDA devices visible to this process (0 without a GPU or a driver).
int nccl_visible_gpus();

struct NcclOptions {
  int device = -1;  // CUDA device of this rank; -1: rank % visible devices
  // A call not complete after this long aborts the communicator (ncclCommAbort) and throws
  // CommError: NCCL itself would wait forever.
  double timeout_seconds = 300.0;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (size and rank are taken from it).
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap, NcclOptions opts = {});
  // Rank 0 writes its id to `path` (write to a temporary, then rename: readers never see half
  // a file); the others wait for the file up to opts.timeout_seconds. Use a fresh path per run.
  static std::unique_ptr<NcclCommunicator> create_from_file(const std::string& path, int rank,
                                                            int size, NcclOptions opts = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  bool sends_wait_for_receiver() const override { return true; }  // ncclSend: rendezvous
  int device() const;

  // Each call is enqueued on the communicator's stream and waited for. NCCL sends are not
  // buffered: a send completes once the receiver takes it, so two ranks that both send first
  // deadlock (reported by the timeout). NCCL checks neither sizes nor dtypes of messages.
  void send(const Tensor& t, int dst, int tag = 0) override;
  void recv(Tensor& t, int src, int tag = 0) override;
  void sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag = 0) override;

  // Sums of f16/bf16 are NCCL's: reduced in the dtype at each hop of its ring or tree, so they
  // can differ from the local backend's "FP32, rounded once" in the last bits. barrier() is an
  // all-reduce of one element (NCCL has no barrier).
  void barrier() override;
  void broadcast(Tensor& t, int root) override;
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::kSum) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  // One NCCL group of a send and a receive per peer (NCCL has no all-to-all of its own); the
  // counts cannot be checked against the senders' here (the caller exchanged them first).
  void all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts, Tensor& out,
                  std::span<const std::int64_t> recv_counts) override;
  // The control collectives take host bytes: staged through device memory (NCCL moves device
  // memory only) as ncclUint8, the flag reduced with ncclMax (the OR of 0s and 1s).
  bool all_reduce_or(bool flag) override;
  void broadcast_bytes(std::span<std::byte> bytes, int root) override;
  void all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

  struct Impl;  // NCCL and CUDA handles (nccl.h stays out of this header)

 private:
  NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int size);
  std::unique_ptr<Impl> impl_;
  int rank_, size_;
};

}  // namespace mixpar
