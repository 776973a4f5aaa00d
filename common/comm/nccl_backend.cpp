// NcclCommunicator: NCCL calls enqueued on the rank's own stream, then waited for by polling
// the stream and NCCL's asynchronous error, with a deadline (a stuck NCCL call never returns
// by itself). Data moves as bytes (ncclUint8) except in reductions, which need the dtype.
#include "comm/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <span>
#include <stdexcept>
#include <thread>

namespace mixpar {
namespace {

[[noreturn]] void fail(const char* lib, const char* call, const char* message, int code,
                       const char* file, int line) {
  throw CommError(std::string(lib) + ": " + call + " failed: " + message + " (" + lib + " " +
                  std::to_string(code) + ") at " + file + ":" + std::to_string(line));
}

void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  if (r != ncclSuccess) fail("nccl", call, ncclGetErrorString(r), static_cast<int>(r), file, line);
}

void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) fail("cuda", call, cudaGetErrorString(e), static_cast<int>(e), file, line);
}

}  // namespace
}  // namespace mixpar

#define MIXPAR_COMM_NCCL(call) ::mixpar::check_nccl((call), #call, __FILE__, __LINE__)
#define MIXPAR_COMM_CUDA(call) ::mixpar::check_cuda((call), #call, __FILE__, __LINE__)

namespace mixpar {
namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case DType::kE4M3: return ncclFloat8e4m3;
    case DType::kE5M2: return ncclFloat8e5m2;
#endif
    default: break;
  }
  throw std::invalid_argument("nccl: this NCCL has no type for " + std::string(dtype_name(d)));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

void require_device(const Tensor& t, const std::string& what) {
  if (!t.defined()) throw std::invalid_argument("nccl: " + what + ": undefined tensor");
  if (t.is_cpu()) {
    throw std::invalid_argument("nccl: " + what + ": device tensors only (got a CPU tensor)");
  }
}

// Device memory for the control collectives' host bytes, freed however the call ends.
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t n) : n_(n) {
    if (n_ > 0) MIXPAR_COMM_CUDA(cudaMalloc(&p_, n_));
  }
  ~DeviceBytes() {
    if (p_) (void)cudaFree(p_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(p_); }
  void upload(const std::byte* host) {
    if (n_ > 0) MIXPAR_COMM_CUDA(cudaMemcpy(p_, host, n_, cudaMemcpyHostToDevice));
  }
  void download(std::byte* host) const {
    if (n_ > 0) MIXPAR_COMM_CUDA(cudaMemcpy(host, p_, n_, cudaMemcpyDeviceToHost));
  }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

}  // namespace

int nccl_visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  int rank = 0;
  double timeout = 300.0;
  void* scratch = nullptr;  // one float: barrier()'s all-reduce
  cudaEvent_t produced = nullptr;  // the default stream's work so far (order_after_producers)

  ~Impl() {
    // Teardown cannot report: failures here leave nothing worse than a leaked handle.
    if (comm) (void)ncclCommDestroy(comm);
    if (scratch) (void)cudaFree(scratch);
    if (produced) (void)cudaEventDestroy(produced);
    if (stream) (void)cudaStreamDestroy(stream);
  }

  void open(int dev, int r, double timeout_s) {
    device = dev;
    rank = r;
    timeout = timeout_s;
    MIXPAR_COMM_CUDA(cudaSetDevice(device));
    MIXPAR_COMM_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MIXPAR_COMM_CUDA(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
    MIXPAR_COMM_CUDA(cudaMalloc(&scratch, sizeof(float)));
  }

  // The stream is non-blocking (NCCL's advice: it must not serialise with unrelated work), so
  // it does not wait for the legacy default stream by itself, on which common/tensor's copies
  // and kernels run and which every blocking stream (the engine's) is ordered with. Before a
  // call reads or writes a tensor, the stream waits for an event recorded there: the tensor's
  // producers are done first (on the device; the host does not block). After the call wait()
  // drains the stream, so consumers and the caching allocator's reuse are ordered too.
  void order_after_producers() {
    MIXPAR_COMM_CUDA(cudaEventRecord(produced, cudaStreamLegacy));
    MIXPAR_COMM_CUDA(cudaStreamWaitEvent(stream, produced, 0));
  }

  // Blocks until the stream's work is done; NCCL errors and the deadline abort the comm.
  void wait(const std::string& what) {
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, what.c_str(), __FILE__, __LINE__);
      ncclResult_t async = ncclSuccess;
      MIXPAR_COMM_NCCL(ncclCommGetAsyncError(comm, &async));
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (async != ncclSuccess || waited > timeout) {
        (void)ncclCommAbort(comm);
        comm = nullptr;
        if (async != ncclSuccess) fail("nccl", what.c_str(), ncclGetErrorString(async), async,
                                       __FILE__, __LINE__);
        throw CommError("nccl: rank " + std::to_string(rank) + ": " + what +
                        " did not complete within " + std::to_string(timeout) +
                        " s; the communicator was aborted");
      }
      std::this_thread::yield();
    }
  }
};

namespace {

std::unique_ptr<NcclCommunicator::Impl> open_impl(const ncclUniqueId& id, int rank, int size,
                                                  const NcclOptions& o) {
  const int gpus = nccl_visible_gpus();
  if (gpus == 0) throw CommError("nccl: no CUDA device is visible to rank " + std::to_string(rank));
  auto impl = std::make_unique<NcclCommunicator::Impl>();
  impl->open(o.device >= 0 ? o.device : rank % gpus, rank, o.timeout_seconds);
  MIXPAR_COMM_NCCL(ncclCommInitRank(&impl->comm, size, id, rank));
  return impl;
}

ncclUniqueId read_id_file(const std::string& path, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  ncclUniqueId id;
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(reinterpret_cast<char*>(&id), sizeof id)) return id;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s) {
      throw CommError("nccl: no NCCL id in '" + path + "' after " + std::to_string(timeout_s) +
                      " s (rank 0 writes it)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // waiting for another process
  }
}

void write_id_file(const std::string& path, const ncclUniqueId& id) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&id), sizeof id);
    if (!out) throw CommError("nccl: cannot write the NCCL id to '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw CommError("nccl: cannot rename '" + tmp + "' to '" + path + "'");
  }
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, int rank, int size)
    : impl_(std::move(impl)), rank_(rank), size_(size) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::device() const { return impl_->device; }

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap,
                                                           NcclOptions opts) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) MIXPAR_COMM_NCCL(ncclGetUniqueId(&id));
  bootstrap.broadcast_bytes(std::as_writable_bytes(std::span(&id, 1)), 0);
  auto impl = open_impl(id, bootstrap.rank(), bootstrap.size(), opts);
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl), bootstrap.rank(), bootstrap.size()));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_from_file(const std::string& path,
                                                                     int rank, int size,
                                                                     NcclOptions opts) {
  if (rank < 0 || rank >= size) {
    throw std::invalid_argument("nccl: rank " + std::to_string(rank) + " of " +
                                std::to_string(size));
  }
  ncclUniqueId id;
  if (rank == 0) {
    MIXPAR_COMM_NCCL(ncclGetUniqueId(&id));
    write_id_file(path, id);
  } else {
    id = read_id_file(path, opts.timeout_seconds);
  }
  auto impl = open_impl(id, rank, size, opts);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl), rank, size));
}

// ---- Point to point

void NcclCommunicator::send(const Tensor& t, int dst, int tag) {
  (void)tag;  // NCCL matches messages by order between a pair, not by tag
  require_device(t, "send");
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclSend(t.data(), t.nbytes(), ncclUint8, dst, impl_->comm, impl_->stream));
  impl_->wait("send(to " + std::to_string(dst) + ")");
  traffic_.record("send", t.nbytes(), 0);
}

void NcclCommunicator::recv(Tensor& t, int src, int tag) {
  (void)tag;
  require_device(t, "recv");
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclRecv(t.data(), t.nbytes(), ncclUint8, src, impl_->comm, impl_->stream));
  impl_->wait("recv(from " + std::to_string(src) + ")");
  traffic_.record("recv", 0, t.nbytes());
}

void NcclCommunicator::sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag) {
  (void)tag;
  require_device(send_t, "sendrecv");
  require_device(recv_t, "sendrecv");
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclGroupStart());
  MIXPAR_COMM_NCCL(
      ncclSend(send_t.data(), send_t.nbytes(), ncclUint8, dst, impl_->comm, impl_->stream));
  MIXPAR_COMM_NCCL(
      ncclRecv(recv_t.data(), recv_t.nbytes(), ncclUint8, src, impl_->comm, impl_->stream));
  MIXPAR_COMM_NCCL(ncclGroupEnd());
  impl_->wait("sendrecv(to " + std::to_string(dst) + ", from " + std::to_string(src) + ")");
  traffic_.record("sendrecv", send_t.nbytes(), recv_t.nbytes());
}

// ---- Collectives

void NcclCommunicator::barrier() {
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclAllReduce(impl_->scratch, impl_->scratch, 1, ncclFloat32, ncclSum,
                                 impl_->comm, impl_->stream));
  impl_->wait("barrier()");
  traffic_.record("barrier", 0, 0);
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  require_device(t, "broadcast");
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclBroadcast(t.data(), t.data(), t.nbytes(), ncclUint8, root, impl_->comm,
                                 impl_->stream));
  impl_->wait("broadcast(root " + std::to_string(root) + ")");
  const bool moves = size_ > 1;
  traffic_.record("broadcast", rank_ == root && moves ? t.nbytes() : 0,
                  rank_ == root ? 0 : t.nbytes());
}

void NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  require_device(t, "all_reduce");
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclAllReduce(t.data(), t.data(), static_cast<std::size_t>(t.numel()),
                                 nccl_type(t.dtype()), nccl_op(op), impl_->comm, impl_->stream));
  impl_->wait("all_reduce(" + std::to_string(t.numel()) + " x " +
              std::string(dtype_name(t.dtype())) + ")");
  const TrafficTotals v = all_reduce_traffic(t.numel(), t.dtype(), size_, rank_);
  traffic_.record("all_reduce", v.bytes_sent, v.bytes_received);
}

void NcclCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  require_device(in, "reduce_scatter");
  require_device(out, "reduce_scatter");
  if (in.dtype() != out.dtype() || in.numel() != out.numel() * size_) {
    throw std::invalid_argument("nccl: reduce_scatter: " + std::to_string(in.numel()) + " in, " +
                                std::to_string(out.numel()) + " out, " + std::to_string(size_) +
                                " ranks (same dtype)");
  }
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclReduceScatter(in.data(), out.data(), static_cast<std::size_t>(out.numel()),
                                     nccl_type(out.dtype()), nccl_op(op), impl_->comm,
                                     impl_->stream));
  impl_->wait("reduce_scatter(" + std::to_string(out.numel()) + ")");
  const std::size_t moved = in.nbytes() - out.nbytes();
  traffic_.record("reduce_scatter", moved, moved);
}

void NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  require_device(in, "all_gather");
  require_device(out, "all_gather");
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * size_) {
    throw std::invalid_argument("nccl: all_gather: " + std::to_string(in.numel()) + " in, " +
                                std::to_string(out.numel()) + " out, " + std::to_string(size_) +
                                " ranks (same dtype)");
  }
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclAllGather(in.data(), out.data(), in.nbytes(), ncclUint8, impl_->comm,
                                 impl_->stream));
  impl_->wait("all_gather(" + std::to_string(in.numel()) + ")");
  const std::size_t moved = out.nbytes() - in.nbytes();
  traffic_.record("all_gather", moved, moved);
}

void NcclCommunicator::all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts,
                                  Tensor& out, std::span<const std::int64_t> recv_counts) {
  require_device(in, "all_to_all");
  require_device(out, "all_to_all");
  if (in.dtype() != out.dtype()) {
    throw std::invalid_argument("nccl: all_to_all: in and out must have the same dtype");
  }
  const TrafficTotals v = all_to_all_traffic(send_counts, recv_counts, in.numel(), out.numel(),
                                             in.dtype(), size_, rank_);
  const std::size_t elem = dtype_size(in.dtype());
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  impl_->order_after_producers();
  std::size_t s_at = 0, r_at = 0;
  MIXPAR_COMM_NCCL(ncclGroupStart());
  for (int p = 0; p < size_; ++p) {
    const auto q = static_cast<std::size_t>(p);
    const auto s_bytes = static_cast<std::size_t>(send_counts[q]) * elem;
    const auto r_bytes = static_cast<std::size_t>(recv_counts[q]) * elem;
    if (s_bytes > 0) {
      MIXPAR_COMM_NCCL(ncclSend(static_cast<const std::byte*>(in.data()) + s_at, s_bytes,
                                ncclUint8, p, impl_->comm, impl_->stream));
    }
    if (r_bytes > 0) {
      MIXPAR_COMM_NCCL(ncclRecv(static_cast<std::byte*>(out.data()) + r_at, r_bytes, ncclUint8,
                                p, impl_->comm, impl_->stream));
    }
    s_at += s_bytes;
    r_at += r_bytes;
  }
  MIXPAR_COMM_NCCL(ncclGroupEnd());
  impl_->wait("all_to_all(" + std::to_string(in.numel()) + " out, " +
              std::to_string(out.numel()) + " in)");
  traffic_.record("all_to_all", v.bytes_sent, v.bytes_received);
}

// ---- Control collectives

bool NcclCommunicator::all_reduce_or(bool flag) {
  const std::byte mine{flag};
  std::byte any{0};
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  DeviceBytes d(1);
  d.upload(&mine);
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(
      ncclAllReduce(d.data(), d.data(), 1, ncclUint8, ncclMax, impl_->comm, impl_->stream));
  impl_->wait("all_reduce_or(1 flag)");
  d.download(&any);
  const TrafficTotals v = all_reduce_traffic(1, std::size_t{1}, size_, rank_);
  traffic_.record("all_reduce_or", v.bytes_sent, v.bytes_received);
  return any != std::byte{0};
}

void NcclCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  DeviceBytes d(bytes.size());
  if (rank_ == root) d.upload(bytes.data());
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclBroadcast(d.data(), d.data(), bytes.size(), ncclUint8, root, impl_->comm,
                                 impl_->stream));
  impl_->wait("broadcast_bytes(root " + std::to_string(root) + ")");
  if (rank_ != root) d.download(bytes.data());
  const bool moves = size_ > 1;
  traffic_.record("broadcast_bytes", rank_ == root && moves ? bytes.size() : 0,
                  rank_ == root ? 0 : bytes.size());
}

void NcclCommunicator::all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size_)) {
    throw std::invalid_argument("nccl: all_gather_bytes: " + std::to_string(in.size()) +
                                " bytes in, " + std::to_string(out.size()) + " out, " +
                                std::to_string(size_) + " ranks");
  }
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  DeviceBytes d_in(in.size()), d_out(out.size());
  d_in.upload(in.data());
  impl_->order_after_producers();
  MIXPAR_COMM_NCCL(ncclAllGather(d_in.data(), d_out.data(), in.size(), ncclUint8, impl_->comm,
                                 impl_->stream));
  impl_->wait("all_gather_bytes(" + std::to_string(in.size()) + ")");
  d_out.download(out.data());
  const std::size_t moved = out.size() - in.size();
  traffic_.record("all_gather_bytes", moved, moved);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  MIXPAR_COMM_CUDA(cudaSetDevice(impl_->device));
  ncclComm_t nc = nullptr;
  MIXPAR_COMM_NCCL(
      ncclCommSplit(impl_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, nullptr));
  traffic_.record("split", 0, 0);
  if (nc == nullptr) return nullptr;
  int r = 0, n = 0;
  MIXPAR_COMM_NCCL(ncclCommUserRank(nc, &r));
  MIXPAR_COMM_NCCL(ncclCommCount(nc, &n));
  auto impl = std::make_unique<Impl>();
  impl->comm = nc;  // owned from here: the Impl destroys it even if open() throws
  impl->open(impl_->device, r, impl_->timeout);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl), r, n));
}

}  // namespace mixpar
