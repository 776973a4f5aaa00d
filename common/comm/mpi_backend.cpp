// MpiCommunicator: every call checks MPI's return code (MPI_ERRORS_RETURN), stages device
// tensors through host copies, runs under the watchdog, and records the same traffic as the
// local backend. Bytes move as unsigned integers of the element's size, so no dtype is ever
// converted in flight; arithmetic happens only in the reductions, in FP32 (double for f64).
#include "comm/mpi_backend.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>
#include <vector>

#include "comm/local_kernels.h"

namespace mixpar {
namespace {

enum CollOp : std::int64_t {
  kBarrier, kBroadcast, kAllReduce, kReduceScatter, kAllGather, kSplit,
  kAllReduceOr, kBroadcastBytes, kAllGatherBytes,  // the control collectives: bytes, no dtype
  kAllToAll
};
constexpr const char* kOpNames[] = {"barrier",       "broadcast",       "all_reduce",
                                    "reduce_scatter", "all_gather",     "split",
                                    "all_reduce_or",  "broadcast_bytes", "all_gather_bytes",
                                    "all_to_all"};

// An MPI type that moves elements of `dt` bit for bit.
MPI_Datatype mover(DType dt) {
  switch (dtype_size(dt)) {
    case 1: return MPI_BYTE;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
  }
}

int as_int(std::int64_t n, const std::string& what) {
  if (n > INT_MAX) {
    throw std::invalid_argument("mpi: " + what + ": " + std::to_string(n) +
                                " elements exceed MPI's int count; split the buffer");
  }
  return static_cast<int>(n);
}

std::byte* bytes_at(const Tensor& t, std::int64_t element) {
  return static_cast<std::byte*>(t.data()) + element * std::int64_t(dtype_size(t.dtype()));
}

// The tensor itself on the CPU, or a host copy of a device tensor (kCommBuffers).
Tensor host_of(const Tensor& t, bool copy_values) {
  if (t.is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype(), MemCategory::kCommBuffers, Device::kCPU);
  if (copy_values && t.numel() > 0) h.copy_from(t);
  return h;
}

void write_back(Tensor& t, const Tensor& host) {
  if (!t.is_cpu() && t.numel() > 0) t.copy_from(host);
}

void require_defined(const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string("mpi: ") + what + ": undefined tensor");
}

std::string desc(std::int64_t op, std::int64_t dtype, std::int64_t count, std::int64_t arg) {
  const auto name = kOpNames[op];
  if (op == kBarrier || op == kSplit) return std::string(name) + "()";
  if (op == kAllReduceOr) return std::string(name) + "(1 flag)";
  if (op == kBroadcastBytes || op == kAllGatherBytes) {
    return std::string(name) + "(" + std::to_string(count) + " bytes" +
           (op == kBroadcastBytes ? ", root " + std::to_string(arg) : " per rank") + ")";
  }
  std::string s = std::string(name) + "(" + std::to_string(count) + " x " +
                  std::string(dtype_name(static_cast<DType>(dtype)));
  if (op == kBroadcast) s += ", root " + std::to_string(arg);
  if (op == kAllReduce || op == kReduceScatter) {
    s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(arg)));
  }
  return s + ")";
}

// MPI_MAX need not propagate NaN; found-inf flags reduced with max must never lose one.
void nan_max(void* in, void* inout, int* len, MPI_Datatype* type) {
  const auto run = [&](auto* a, auto* b) {
    for (int i = 0; i < *len; ++i) {
      if (!std::isnan(b[i]) && (std::isnan(a[i]) || a[i] > b[i])) b[i] = a[i];
    }
  };
  if (*type == MPI_DOUBLE) run(static_cast<double*>(in), static_cast<double*>(inout));
  else run(static_cast<float*>(in), static_cast<float*>(inout));
}

MPI_Op nan_max_op() {
  static const MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&nan_max, /*commute=*/1, &o);
    return o;
  }();
  return op;
}

}  // namespace

// ---- CallWatchdog

CallWatchdog::CallWatchdog(double seconds, Handler on_timeout)
    : seconds_(seconds), on_timeout_(std::move(on_timeout)) {
  // 1e10 s overflowed the steady clock's deadline, which then lay in the past: refused.
  check_watchdog_seconds("mpi communicator", seconds_);
  if (seconds_ > 0) thread_ = std::thread([this] { thread_main(); });
}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CallWatchdog::Guard CallWatchdog::watch(std::string what) {
  if (seconds_ <= 0) return Guard(nullptr, 0);
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = ++next_id_;
    active_ = id;
    what_ = std::move(what);
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(seconds_));
  }
  cv_.notify_all();
  return Guard(this, id);
}

CallWatchdog::Guard::~Guard() {
  if (!w_) return;
  {
    std::lock_guard lock(w_->mu_);
    if (w_->active_ == id_) w_->active_ = 0;
  }
  w_->cv_.notify_all();
}

void CallWatchdog::thread_main() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (active_ == 0) {
      cv_.wait(lock, [&] { return stop_ || active_ != 0; });
      continue;
    }
    const std::uint64_t id = active_;
    if (cv_.wait_until(lock, deadline_, [&] { return stop_ || active_ != id; })) continue;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", seconds_);
    const std::string message = what_ + ": still blocked after " + secs + " s";
    lock.unlock();
    on_timeout_(message);  // fires once per call: then wait for that call to end
    lock.lock();
    cv_.wait(lock, [&] { return stop_ || active_ != id; });
  }
}

// ---- MpiSession

MpiSession::MpiSession(int* argc, char*** argv) {
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_);
  if (provided_ < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw std::runtime_error("mpi: the library gives thread level " + std::to_string(provided_) +
                             ", DDP needs at least MPI_THREAD_SERIALIZED");
  }
}

MpiSession::~MpiSession() { MPI_Finalize(); }

// ---- MpiCommunicator: setup

MpiCommunicator::MpiCommunicator(MPI_Comm comm, MpiOptions opts) : opts_(std::move(opts)) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw std::logic_error("MpiCommunicator: MPI is not initialised (MpiSession)");
  MPI_Comm_dup(comm, &comm_);
  init();
}

MpiCommunicator::MpiCommunicator(Adopt, MPI_Comm comm, MpiOptions opts)
    : comm_(comm), opts_(std::move(opts)) {
  init();
}

void MpiCommunicator::init() {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (size_ != world_size) {
    // The group's members by world rank: a report names processes as mpirun numbers them.
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> local(static_cast<std::size_t>(size_)), global(local.size());
    for (int i = 0; i < size_; ++i) local[std::size_t(i)] = i;
    MPI_Group_translate_ranks(mine, size_, local.data(), world, global.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    group_ = ", rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
             " in the group of world ranks {";
    for (int i = 0; i < size_; ++i) group_ += (i ? ", " : "") + std::to_string(global[std::size_t(i)]);
    group_ += "}";
  }
  CallWatchdog::Handler h = opts_.on_watchdog;
  if (!h) {
    h = [](const std::string& m) {
      std::fprintf(stderr, "mixpar mpi watchdog: %s; aborting the job\n", m.c_str());
      std::fflush(stderr);
      // Its own exit code (util/errors.h): 3 is a halted run's, 1 an internal error's.
      MPI_Abort(MPI_COMM_WORLD, kExitWatchdog);
    };
  }
  watchdog_ = std::make_unique<CallWatchdog>(opts_.watchdog_seconds, std::move(h));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  try {
    reap_sends(/*wait_all=*/true);
  } catch (...) {
    // A destructor cannot report; the messages' receivers will see the failure instead.
  }
  MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int rc, const std::string& what) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError("mpi: rank " + std::to_string(rank_) + ": " + what + " failed: " +
                  std::string(text, static_cast<std::size_t>(len)));
}

std::string MpiCommunicator::watch_label(const std::string& what) const {
  std::string s = "world rank " + std::to_string(world_rank_);
  if (!opts_.identity.empty()) s += " (" + opts_.identity + ")";
  return s + group_ + ", in " + what;
}

CallWatchdog::Guard MpiCommunicator::watch(const std::string& what) {
  return watchdog_->watch(watch_label(what));
}

// Every rank shares its (op, dtype, count, arg); all compare with rank 0's.
void MpiCommunicator::agree(const std::string& what, std::int64_t op, const Tensor* t,
                            std::int64_t count, std::int64_t arg) {
  ++calls_;
  if (!opts_.check_calls) return;
  const std::int64_t mine[4] = {op, t ? static_cast<std::int64_t>(t->dtype()) : 0, count, arg};
  std::vector<std::int64_t> all(4 * static_cast<std::size_t>(size_));
  {
    const auto g = watch(what);
    check(MPI_Allgather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm_), what);
  }
  for (int q = 1; q < size_; ++q) {
    const std::int64_t* d = &all[4 * static_cast<std::size_t>(q)];
    const bool same = d[0] == all[0] && (d[0] == kSplit ||
                                          (d[1] == all[1] && d[2] == all[2] && d[3] == all[3]));
    if (!same) {
      throw CommError("mpi: ranks disagree on collective call #" + std::to_string(calls_) +
                      ": rank 0 called " + desc(all[0], all[1], all[2], all[3]) + ", rank " +
                      std::to_string(q) + " called " + desc(d[0], d[1], d[2], d[3]));
    }
  }
}

void MpiCommunicator::reap_sends(bool wait_all) {
  for (std::size_t i = 0; i < pending_.size();) {
    int done = 0;
    if (wait_all) {
      const auto g = watch("completing a send");
      check(MPI_Wait(&pending_[i].request, MPI_STATUS_IGNORE), "send completion");
      done = 1;
    } else {
      check(MPI_Test(&pending_[i].request, &done, MPI_STATUS_IGNORE), "send completion");
    }
    if (done) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

// ---- Point to point

void MpiCommunicator::send(const Tensor& t, int dst, int tag) {
  require_defined(t, "send");
  reap_sends(false);
  Tensor staging = Tensor::empty(t.shape(), t.dtype(), MemCategory::kCommBuffers, Device::kCPU);
  if (t.numel() > 0) staging.copy_from(t);
  const std::string what = "send(to " + std::to_string(dst) + ", tag " + std::to_string(tag) + ")";
  MPI_Request req;
  check(MPI_Isend(staging.data(), as_int(std::int64_t(t.nbytes()), what), MPI_BYTE, dst, tag,
                  comm_, &req),
        what);
  pending_.push_back({req, std::move(staging)});
  traffic_.record("send", t.nbytes(), 0);
}

void MpiCommunicator::recv(Tensor& t, int src, int tag) {
  require_defined(t, "recv");
  const std::string what = "recv(from " + std::to_string(src) + ", tag " + std::to_string(tag) +
                           ", " + std::to_string(t.numel()) + " x " +
                           std::string(dtype_name(t.dtype())) + ")";
  Tensor host = host_of(t, false);
  MPI_Status st;
  {
    const auto g = watch(what);
    check(MPI_Recv(host.data(), as_int(std::int64_t(t.nbytes()), what), MPI_BYTE, src, tag,
                   comm_, &st),
          what);
  }
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if (static_cast<std::size_t>(got) != t.nbytes()) {
    throw CommError("mpi: rank " + std::to_string(rank_) + ": " + what + " expected " +
                    std::to_string(t.nbytes()) + " bytes, rank " + std::to_string(src) +
                    " sent " + std::to_string(got));
  }
  write_back(t, host);
  traffic_.record("recv", 0, t.nbytes());
}

void MpiCommunicator::sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag) {
  require_defined(send_t, "sendrecv");
  require_defined(recv_t, "sendrecv");
  const std::string what = "sendrecv(to " + std::to_string(dst) + ", from " +
                           std::to_string(src) + ", tag " + std::to_string(tag) + ")";
  const Tensor out = host_of(send_t, true);
  Tensor in = host_of(recv_t, false);
  MPI_Status st;
  {
    const auto g = watch(what);
    check(MPI_Sendrecv(out.data(), as_int(std::int64_t(out.nbytes()), what), MPI_BYTE, dst, tag,
                       in.data(), as_int(std::int64_t(in.nbytes()), what), MPI_BYTE, src, tag,
                       comm_, &st),
          what);
  }
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  if (static_cast<std::size_t>(got) != in.nbytes()) {
    throw CommError("mpi: rank " + std::to_string(rank_) + ": " + what + " expected " +
                    std::to_string(in.nbytes()) + " bytes, got " + std::to_string(got));
  }
  write_back(recv_t, in);
  traffic_.record("sendrecv", send_t.nbytes(), recv_t.nbytes());
}

// ---- Collectives

void MpiCommunicator::barrier() {
  agree("barrier()", kBarrier, nullptr, 0, 0);
  {
    const auto g = watch("barrier()");
    check(MPI_Barrier(comm_), "barrier()");
  }
  traffic_.record("barrier", 0, 0);
}

void MpiCommunicator::broadcast(Tensor& t, int root) {
  require_defined(t, "broadcast");
  const std::string what = desc(kBroadcast, std::int64_t(t.dtype()), t.numel(), root);
  agree(what, kBroadcast, &t, t.numel(), root);
  Tensor host = host_of(t, rank_ == root);
  {
    const auto g = watch(what);
    check(MPI_Bcast(host.data(), as_int(t.numel(), what), mover(t.dtype()), root, comm_), what);
  }
  if (rank_ != root) write_back(t, host);
  const bool moves = size_ > 1;
  traffic_.record("broadcast", rank_ == root && moves ? t.nbytes() : 0,
                  rank_ == root ? 0 : t.nbytes());
}

// Rank r receives its ring chunk (or block r) from every rank, reduces it in rank order with
// the local backend's kernel into `out`, and for an all-reduce the chunks are then all-gathered.
void MpiCommunicator::reduce_rank_order(const Tensor& in, Tensor& out, ReduceOp op,
                                        bool scatter_blocks) {
  const std::int64_t numel = in.numel();
  const MPI_Datatype type = mover(in.dtype());
  std::vector<int> send_counts, send_displs, chunk_counts;
  for (int q = 0; q < size_; ++q) {
    const ChunkRange c = ring_chunk(numel, size_, q);
    send_counts.push_back(as_int(c.count, "all_reduce"));
    send_displs.push_back(as_int(c.begin, "all_reduce"));
  }
  const int mine = send_counts[std::size_t(rank_)];
  const std::vector<int> recv_counts(std::size_t(size_), mine);
  std::vector<int> recv_displs;
  for (int p = 0; p < size_; ++p) recv_displs.push_back(p * mine);
  Tensor gathered = Tensor::empty({std::int64_t(size_) * mine}, in.dtype(),
                                  MemCategory::kCommBuffers);
  check(MPI_Alltoallv(in.data(), send_counts.data(), send_displs.data(), type, gathered.data(),
                      recv_counts.data(), recv_displs.data(), type, comm_),
        "all_reduce (alltoallv)");
  std::vector<const std::byte*> srcs;
  for (int p = 0; p < size_; ++p) srcs.push_back(bytes_at(gathered, std::int64_t(p) * mine));
  std::byte* dst = bytes_at(out, scatter_blocks ? 0 : send_displs[std::size_t(rank_)]);
  local::reduce_elements(srcs, {&dst, 1}, mine, in.dtype(), op);
  if (scatter_blocks) return;
  check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data(), send_counts.data(),
                       send_displs.data(), type, comm_),
        "all_reduce (allgatherv)");
}

// MPI's own reduction on FP32 (or double), narrow dtypes through FP32 copies rounded once:
// MPI_Allreduce in place on t (out null), or MPI_Reduce_scatter_block from t into out.
void MpiCommunicator::reduce_with_mpi(Tensor& t, ReduceOp op, Tensor* out) {
  const bool f64 = t.dtype() == DType::kF64;
  const bool stage = !f64 && t.dtype() != DType::kF32;
  const auto wide = [&](const Tensor& x) {
    if (!stage) return x;
    Tensor w = Tensor::empty(x.shape(), DType::kF32, MemCategory::kCommBuffers);
    w.copy_from(x);
    return w;
  };
  Tensor work = wide(t);
  const MPI_Op mop = op == ReduceOp::kSum ? MPI_SUM : nan_max_op();
  const MPI_Datatype type = f64 ? MPI_DOUBLE : MPI_FLOAT;
  if (!out) {
    check(MPI_Allreduce(MPI_IN_PLACE, work.data(), as_int(t.numel(), "all_reduce"), type, mop,
                        comm_),
          "all_reduce (MPI_Allreduce)");
    if (stage) t.copy_from(work, Saturation::kNoSat);
    return;
  }
  Tensor result = wide(*out);
  check(MPI_Reduce_scatter_block(work.data(), result.data(), as_int(out->numel(), "reduce_scatter"),
                                 type, mop, comm_),
        "reduce_scatter (MPI_Reduce_scatter_block)");
  if (stage) out->copy_from(result, Saturation::kNoSat);
}

void MpiCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  require_defined(t, "all_reduce");
  const std::string what = desc(kAllReduce, std::int64_t(t.dtype()), t.numel(), std::int64_t(op));
  agree(what, kAllReduce, &t, t.numel(), std::int64_t(op));
  if (size_ > 1 && t.numel() > 0) {
    Tensor host = host_of(t, true);
    const auto g = watch(what);
    if (opts_.reduction == MpiReduction::kRankOrder) reduce_rank_order(host, host, op, false);
    else reduce_with_mpi(host, op, nullptr);
    write_back(t, host);
  }
  const TrafficTotals v = all_reduce_traffic(t.numel(), t.dtype(), size_, rank_);
  traffic_.record("all_reduce", v.bytes_sent, v.bytes_received);
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  require_defined(in, "reduce_scatter");
  require_defined(out, "reduce_scatter");
  if (in.dtype() != out.dtype() || in.numel() != out.numel() * size_) {
    throw std::invalid_argument("mpi: reduce_scatter: " + std::to_string(in.numel()) + " x " +
                                std::string(dtype_name(in.dtype())) + " in, " +
                                std::to_string(out.numel()) + " x " +
                                std::string(dtype_name(out.dtype())) + " out, " +
                                std::to_string(size_) + " ranks");
  }
  const std::string what =
      desc(kReduceScatter, std::int64_t(out.dtype()), out.numel(), std::int64_t(op));
  agree(what, kReduceScatter, &out, out.numel(), std::int64_t(op));
  const Tensor h_in = host_of(in, true);
  Tensor h_out = host_of(out, false);
  if (out.numel() > 0) {
    const auto g = watch(what);
    if (opts_.reduction == MpiReduction::kRankOrder) {
      reduce_rank_order(h_in, h_out, op, true);
    } else {
      Tensor work_in = h_in;  // a handle: reduce_with_mpi only reads it here
      reduce_with_mpi(work_in, op, &h_out);
    }
  }
  write_back(out, h_out);
  const std::size_t moved = in.nbytes() - out.nbytes();
  traffic_.record("reduce_scatter", moved, moved);
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  require_defined(in, "all_gather");
  require_defined(out, "all_gather");
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * size_) {
    throw std::invalid_argument("mpi: all_gather: " + std::to_string(in.numel()) + " x " +
                                std::string(dtype_name(in.dtype())) + " in, " +
                                std::to_string(out.numel()) + " x " +
                                std::string(dtype_name(out.dtype())) + " out, " +
                                std::to_string(size_) + " ranks");
  }
  const std::string what = desc(kAllGather, std::int64_t(in.dtype()), in.numel(), 0);
  agree(what, kAllGather, &in, in.numel(), 0);
  const Tensor h_in = host_of(in, true);
  Tensor h_out = host_of(out, false);
  {
    const auto g = watch(what);
    const int k = as_int(in.numel(), what);
    check(MPI_Allgather(h_in.data(), k, mover(in.dtype()), h_out.data(), k, mover(in.dtype()),
                        comm_),
          what);
  }
  write_back(out, h_out);
  const std::size_t moved = out.nbytes() - in.nbytes();
  traffic_.record("all_gather", moved, moved);
}

void MpiCommunicator::all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts,
                                 Tensor& out, std::span<const std::int64_t> recv_counts) {
  require_defined(in, "all_to_all");
  require_defined(out, "all_to_all");
  if (in.dtype() != out.dtype()) {
    throw std::invalid_argument("mpi: all_to_all: " + std::string(dtype_name(in.dtype())) +
                                " in, " + std::string(dtype_name(out.dtype())) + " out");
  }
  const TrafficTotals v = all_to_all_traffic(send_counts, recv_counts, in.numel(), out.numel(),
                                             in.dtype(), size_, rank_);
  const std::string what = desc(kAllToAll, std::int64_t(in.dtype()), 0, 0);
  agree(what, kAllToAll, &in, 0, 0);
  // Each pair's counts, exchanged and compared: a mismatch would otherwise corrupt memory.
  std::vector<std::int64_t> theirs(static_cast<std::size_t>(size_));
  {
    const auto g = watch(what);
    check(MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T, comm_),
          what);
  }
  std::vector<int> sc, sd, rc, rd;
  std::int64_t s_at = 0, r_at = 0;
  for (int p = 0; p < size_; ++p) {
    const auto q = static_cast<std::size_t>(p);
    if (theirs[q] != recv_counts[q]) {
      throw CommError("mpi: all_to_all: rank " + std::to_string(p) + " sends " +
                      std::to_string(theirs[q]) + " elements to rank " + std::to_string(rank_) +
                      ", which expects " + std::to_string(recv_counts[q]));
    }
    sc.push_back(as_int(send_counts[q], what));
    sd.push_back(as_int(s_at, what));
    rc.push_back(as_int(recv_counts[q], what));
    rd.push_back(as_int(r_at, what));
    s_at += send_counts[q];
    r_at += recv_counts[q];
  }
  const Tensor h_in = host_of(in, true);
  Tensor h_out = host_of(out, false);
  {
    const auto g = watch(what);
    check(MPI_Alltoallv(h_in.data(), sc.data(), sd.data(), mover(in.dtype()), h_out.data(),
                        rc.data(), rd.data(), mover(in.dtype()), comm_),
          what);
  }
  write_back(out, h_out);
  traffic_.record("all_to_all", v.bytes_sent, v.bytes_received);
}

// ---- Control collectives: bools as MPI_CXX_BOOL, bytes as MPI_BYTE.

bool MpiCommunicator::all_reduce_or(bool flag) {
  const std::string what = desc(kAllReduceOr, 0, 1, 0);
  agree(what, kAllReduceOr, nullptr, 1, 0);
  bool any = flag;
  {
    const auto g = watch(what);
    check(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_CXX_BOOL, MPI_LOR, comm_), what);
  }
  const TrafficTotals v = all_reduce_traffic(1, std::size_t{1}, size_, rank_);
  traffic_.record("all_reduce_or", v.bytes_sent, v.bytes_received);
  return any;
}

void MpiCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
  const auto n = static_cast<std::int64_t>(bytes.size());
  const std::string what = desc(kBroadcastBytes, 0, n, root);
  agree(what, kBroadcastBytes, nullptr, n, root);
  {
    const auto g = watch(what);
    check(MPI_Bcast(bytes.data(), as_int(n, what), MPI_BYTE, root, comm_), what);
  }
  const bool moves = size_ > 1;
  traffic_.record("broadcast_bytes", rank_ == root && moves ? bytes.size() : 0,
                  rank_ == root ? 0 : bytes.size());
}

void MpiCommunicator::all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size_)) {
    throw std::invalid_argument("mpi: all_gather_bytes: " + std::to_string(in.size()) +
                                " bytes in, " + std::to_string(out.size()) + " out, " +
                                std::to_string(size_) + " ranks");
  }
  const auto n = static_cast<std::int64_t>(in.size());
  const std::string what = desc(kAllGatherBytes, 0, n, 0);
  agree(what, kAllGatherBytes, nullptr, n, 0);
  {
    const auto g = watch(what);
    const int k = as_int(n, what);
    check(MPI_Allgather(in.data(), k, MPI_BYTE, out.data(), k, MPI_BYTE, comm_), what);
  }
  const std::size_t moved = out.size() - in.size();
  traffic_.record("all_gather_bytes", moved, moved);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  agree("split()", kSplit, nullptr, 0, 0);
  MPI_Comm nc = MPI_COMM_NULL;
  {
    const auto g = watch("split()");
    check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &nc), "split()");
  }
  traffic_.record("split", 0, 0);
  if (nc == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<Communicator>(new MpiCommunicator(Adopt{}, nc, opts_));
}

// Two threads of a process may call MPI at once only under MPI_THREAD_MULTIPLE (MpiSession
// asks for it; a library may give SERIALIZED). Every process links the same library, so every
// rank answers alike before any collective call.
std::unique_ptr<Communicator> MpiCommunicator::dup() {
  int level = 0;
  check(MPI_Query_thread(&level), "dup()");
  if (level != MPI_THREAD_MULTIPLE) return nullptr;
  return split(0, rank());
}

}  // namespace mixpar
