// The ring on sendrecv. A reduce-scatter step s sends chunk r-s and receives chunk r-s-1,
// adding its own values to it (sendrecv_reduce); an all-gather step s sends chunk r+1-s and
// receives chunk r-s (sendrecv). Partial results live in slice-sized scratch buffers
// (kCommBuffers), never in the caller's buffer, so only the owned chunk of it changes during
// the reduce-scatter.
#include "ring_allreduce.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "comm/local_kernels.h"
#include "ring_kernels.h"
#include "tensor/ledger.h"

namespace mixpar::ch04 {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Up to this many ranks the exchange path keeps its all_to_all counts on the stack.
constexpr int kMaxExchangeRanks = 64;
// A 2-rank reduce-scatter's input from which the exchange beats the gather path (measured:
// ring_reduce_scatter).
constexpr std::size_t kTwoRankExchangeMinBytes = 1024;

bool is_narrow(DType dt) { return dtype_size(dt) < 4; }

DType wire_dtype(DType buf, const RingOptions& o) {
  return o.accumulation == RingAccumulation::kFp32Partials && is_narrow(buf) ? DType::kF32 : buf;
}

// Who is next and previous, which physical chunk a logical chunk index is, and how chunks are
// cut into slices. shift maps logical chunks to physical ones: 0 for the in-place convention
// (rank r owns chunk r+1), -1 for Communicator's block semantics (rank r owns block r).
struct Ring {
  Communicator* comm;
  int n, r, next, prev;
  std::int64_t numel;
  int shift;
  std::int64_t slice_elems;  // elements per slice
  int slices;                // slices of the longest chunk (the first one)

  ChunkRange chunk(int logical) const { return ring_chunk(numel, n, mod(logical + shift, n)); }
  ChunkRange slice(int logical, int j) const {
    const ChunkRange c = chunk(logical);
    const std::int64_t b = std::min(c.count, j * slice_elems);
    const std::int64_t e = std::min(c.count, (j + 1) * slice_elems);
    return {c.begin + b, e - b};
  }
};

Ring make_ring(Communicator& comm, std::int64_t numel, DType dt, int shift,
               const RingOptions& o) {
  Ring g{&comm, comm.size(), comm.rank(), (comm.rank() + 1) % comm.size(),
         (comm.rank() + comm.size() - 1) % comm.size(), numel, shift, 1, 0};
  const std::int64_t longest = ring_chunk(numel, g.n, 0).count;
  const std::size_t slice_bytes = o.slice_bytes.value_or(
      g.n <= 2 ? RingOptions::kSliceBytesTwoRanks : RingOptions::kSliceBytesMoreRanks);
  const auto per_slice = static_cast<std::int64_t>(slice_bytes / dtype_size(dt));
  g.slice_elems = slice_bytes == 0 ? std::max<std::int64_t>(longest, 1)
                                   : std::max<std::int64_t>(per_slice, 1);
  g.slices = static_cast<int>((longest + g.slice_elems - 1) / g.slice_elems);
  return g;
}

// The ring's buffers, kept from call to call by each thread (a rank is a thread, or a
// process's main thread under MPI, and its calls on all its communicators run one after
// another, so one set per thread is never used by two calls at once). Allocating them on every
// call cost as much as the rest of a small all-reduce. They are the ring's own memory: the
// gather and exchange paths' buffers, each at most the larger of the gather limit and a
// buffer that the exchange limits admit (plus one chunk's padding), and the hops' three
// slices (at most 3 x the default 2-rank slice, 6 MiB; see Scratch). They are charged to a
// ledger of their own like the local backend's one-shot staging buffers are the fabric's
// (comm/local_oneshot.h): a rank's ledger sees no buffer that outlives the call it served.
// Declared first, the ledger outlives the tensors.
struct RingScratch {
  MemoryLedger ledger{-1};
  Tensor all, acc;
  Tensor mine, padded;  // the exchange path's reduced chunk, and an uneven chunking's gather
  Tensor partial[2], arrived;  // the hops' slices (Scratch)
  Tensor all_view;      // the last view take_all() gave of `all`
  // The data of `slot`, which holds at least numel elements of `dtype` (reallocated when too
  // small or of another dtype).
  std::byte* reserve(Tensor& slot, std::int64_t numel, DType dtype) {
    if (!slot.defined() || slot.dtype() != dtype || slot.numel() < numel) {
      if (&slot == &all) all_view = Tensor();
      slot = Tensor();  // freed before its successor is allocated
      slot = Tensor::empty({numel}, dtype, MemCategory::kCommBuffers, Device::kCPU, &ledger);
    }
    return static_cast<std::byte*>(slot.data());
  }
  // numel elements of `dtype` from `slot`.
  Tensor take(Tensor& slot, std::int64_t numel, DType dtype) {
    reserve(slot, numel, dtype);
    return slot.flat_slice(0, numel);
  }
  // The same from `all`, the view kept while the size repeats: a Tensor view allocates its
  // shape, which at a few bytes per rank cost as much as the reduction.
  Tensor& take_all(std::int64_t numel, DType dtype) {
    if (all_view.defined() && all_view.numel() == numel && all_view.dtype() == dtype) {
      return all_view;
    }
    all_view = take(all, numel, dtype);
    return all_view;
  }
};

RingScratch& ring_scratch() {
  thread_local RingScratch s;
  return s;
}

// Slice-sized buffers in the wire dtype, views of the thread's ring scratch. Partial results
// alternate between two: a hop writes the next partial result into one while its neighbour may
// still be reading the one it sent. `arrived` is where a message lands when it is received
// before being added (see reduce_hop). Kept from call to call like the gather path's buffers:
// freed on every call, three 64 KiB buffers made glibc return the heap's top to the kernel
// and fault it back in on the next call, which cost a 2-rank 128 KiB all-reduce two page faults
// a call and 30 us against the 10 us of 64 KiB. Only slices up to the default size are kept:
// a caller's larger slices (or none, slice_bytes 0: whole chunks) are the call's own buffers,
// charged to the rank's ledger and freed with the call, so no thread holds three chunks of
// the largest buffer it ever reduced.
struct Scratch {
  Tensor partial[2], arrived;
  Scratch(const Ring& g, DType wire) {
    const std::int64_t n = std::min(g.slice_elems, ring_chunk(g.numel, g.n, 0).count);
    if (static_cast<std::size_t>(n) * dtype_size(wire) > RingOptions::kSliceBytesTwoRanks) {
      for (Tensor* t : {&partial[0], &partial[1], &arrived}) {
        *t = Tensor::empty({n}, wire, MemCategory::kCommBuffers);
      }
      return;
    }
    RingScratch& s = ring_scratch();
    partial[0] = s.take(s.partial[0], n, wire);
    partial[1] = s.take(s.partial[1], n, wire);
    arrived = s.take(s.arrived, n, wire);
  }
};

Tensor view(const Tensor& t, ChunkRange c) { return t.flat_slice(c.begin, c.count); }

RingEvent event(const char* phase, int step, int rank, int to, int from, int sent_chunk,
                int got_chunk) {
  RingEvent e;
  e.phase = phase;
  e.step = step;
  e.rank = rank;
  e.to = to;
  e.from = from;
  e.sent_chunk = sent_chunk;
  e.got_chunk = got_chunk;
  return e;
}

void record(const RingOptions& o, RingEvent e, const Tensor* sent, const Tensor* got,
            const Tensor* result) {
  if (!o.trace) return;
  if (sent) e.sent = sent->to_floats();
  if (got) e.got = got->to_floats();
  if (result) e.result = result->to_floats();
  o.trace->push_back(std::move(e));
}

void require_cpu(const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
  if (!t.is_cpu()) {
    throw std::invalid_argument(std::string(what) +
                                ": the hand-built ring reduces on the CPU; device buffers go "
                                "through the backend's own collective (NCCL)");
  }
}

// One reduce-scatter hop: send ours on, and out = what arrives op own. sendrecv_reduce adds as
// it receives (NCCL's recvReduceSend; the local backend reads the neighbour's slice in place,
// so the hop makes one pass over memory). A traced run receives into `got` and adds in a second
// pass instead, so that the trace can show what arrived.
void reduce_hop(const Ring& g, const Tensor& send, Tensor& got, const Tensor& own, Tensor& out,
                ReduceOp op, const RingOptions& o) {
  if (o.trace) {
    g.comm->sendrecv(send, g.next, got, g.prev, o.tag);
    hop_combine(got, own, out, op);
  } else {
    g.comm->sendrecv_reduce(send, g.next, got, g.prev, own, out, op, o.tag);
  }
}

// Reduce-scatter of slice j: src holds this rank's values; the owned slice's reduction is
// written to dst at (index - dst_offset).
void reduce_scatter_slice(const Ring& g, int j, const Tensor& src, Tensor& dst,
                          std::int64_t dst_offset, ReduceOp op, Scratch& s,
                          const RingOptions& o) {
  for (int step = 0; step < g.n - 1; ++step) {
    const ChunkRange sc = g.slice(g.r - step, j);
    const ChunkRange rc = g.slice(g.r - step - 1, j);
    Tensor send = s.partial[step % 2].flat_slice(0, sc.count);
    if (step == 0) {
      // Our own values go out first: straight from the buffer unless the wire is wider.
      if (src.dtype() == send.dtype()) send = view(src, sc);
      else send.copy_from(view(src, sc));
    }
    const bool last = step == g.n - 2;
    Tensor out = last ? dst.flat_slice(rc.begin - dst_offset, rc.count)
                      : s.partial[(step + 1) % 2].flat_slice(0, rc.count);
    Tensor got = s.arrived.flat_slice(0, rc.count);
    reduce_hop(g, send, got, view(src, rc), out, op, o);
    record(o,
           event("reduce-scatter", step, g.r, g.next, g.prev, mod(g.r - step + g.shift, g.n),
                 mod(g.r - step - 1 + g.shift, g.n)),
           &send, &got, &out);
  }
}

// All-gather of slice j, in place on buf: the owned slice goes round until everyone has all.
void all_gather_slice(const Ring& g, int j, Tensor& buf, const RingOptions& o) {
  for (int step = 0; step < g.n - 1; ++step) {
    const Tensor send = view(buf, g.slice(g.r + 1 - step, j));
    Tensor got = view(buf, g.slice(g.r - step, j));
    g.comm->sendrecv(send, g.next, got, g.prev, o.tag);
    record(o,
           event("all-gather", step, g.r, g.next, g.prev, mod(g.r + 1 - step + g.shift, g.n),
                 mod(g.r - step + g.shift, g.n)),
           &send, &got, &got);
  }
}

// The gather path for small buffers (RingOptions::oneshot_max_bytes).
// `ranks` copies of buf; the limit is the ring's size's.
bool gathers(const Communicator& comm, int ranks, const Tensor& buf, const RingOptions& o) {
  return !o.trace &&
         buf.nbytes() * static_cast<std::size_t>(ranks) <= ring_oneshot_max_bytes(o, comm.size());
}

std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.data()); }

// Every rank's `numel` elements of buf, rank after rank (in the thread's gather scratch).
const Tensor& gather_all(Communicator& comm, const Tensor& buf) {
  Tensor& all = ring_scratch().take_all(buf.numel() * comm.size(), buf.dtype());
  comm.all_gather(buf, all);
  return all;
}

// One chunk of the reduction, from every rank's values of it (rank q's `count` elements at
// element q * stride + offset of `all`, of `dtype`), in the order and with the roundings the
// hops give it: it starts as rank `first`'s values (sent in the wire dtype), and each next
// rank round the ring adds its own values to what arrives (hop_combine(incoming, own), as
// reduce_hop), the last one rounding into `out` (`dtype`). The chunk's bits do not depend on
// which rank computes them. On raw pointers (hop_combine's kernel): no Tensor view per hop.
// The first hop adds rank `first`'s values as they are, not widened to the wire dtype first
// as the hops send them: widening to FP32 is exact and the kernel adds in FP32 (or double)
// either way, so the sum is the same.
void reduce_in_ring_order(const Ring& g, const std::byte* all, DType dtype, std::int64_t stride,
                          std::int64_t offset, std::int64_t count, int first, DType wire,
                          std::byte* out, ReduceOp op) {
  if (count == 0) return;
  const std::size_t elem = dtype_size(dtype);
  const auto own = [&](int q) {
    return all + static_cast<std::size_t>(q * stride + offset) * elem;
  };
  // The running partial result (wire dtype); two ranks never need it: their one hop is the last.
  RingScratch& s = ring_scratch();
  std::byte* acc = g.n > 2 ? s.reserve(s.acc, count, wire) : nullptr;
  const std::byte* partial = own(first);
  DType partial_dtype = dtype;
  for (int k = 1; k < g.n; ++k) {
    const bool last = k == g.n - 1;
    local::combine_elements(partial, partial_dtype, own(mod(first + k, g.n)), dtype,
                            last ? out : acc, last ? dtype : wire, count, op);
    partial = acc;
    partial_dtype = wire;
  }
}

// The exchange path for mid-sized buffers (RingOptions::exchange_max_bytes, and
// reduce_scatter_exchange_max_bytes for ring_reduce_scatter). A reduction takes it from 3
// ranks: with 2 the hops are as few hand-offs, and the exchange's copy of the chunks it
// receives would only add a pass over memory.
bool exchanges(const Tensor& buf, const RingOptions& o, std::size_t limit) {
  return !o.trace && buf.nbytes() <= limit;
}
bool reduction_exchanges(const Ring& g, const Tensor& buf, const RingOptions& o,
                         std::size_t limit) {
  return g.n >= 3 && g.n <= kMaxExchangeRanks && exchanges(buf, o, limit);
}

// The exchange path's reduce-scatter: rank r reduces physical chunk r (of the in-place
// convention's chunks or of the blocks, as g.shift says) into `out`. One all_to_all hands it
// the N ranks' values of that chunk (rank q's block for rank p is q's physical chunk p, so
// the input is the buffer itself, in order), which it adds in the ring order of its logical
// chunk: the hops' bits, whoever computes them. Traffic: each rank sends the N-1 chunks it
// does not reduce and receives N-1 of its own, the ring's (N-1)/N.
void exchange_reduce_scatter(const Ring& g, const Tensor& in, Tensor& out, ReduceOp op,
                             DType wire) {
  const ChunkRange mine = ring_chunk(g.numel, g.n, g.r);
  std::int64_t send[kMaxExchangeRanks], recv[kMaxExchangeRanks];
  for (int p = 0; p < g.n; ++p) {
    send[p] = ring_chunk(g.numel, g.n, p).count;
    recv[p] = mine.count;
  }
  Tensor& parts = ring_scratch().take_all(mine.count * g.n, in.dtype());
  g.comm->all_to_all(in, {send, static_cast<std::size_t>(g.n)}, parts,
                     {recv, static_cast<std::size_t>(g.n)});
  // Physical chunk r is logical chunk r - shift, which starts at rank r - shift.
  reduce_in_ring_order(g, bytes_of(parts), in.dtype(), mine.count, 0, mine.count,
                       mod(g.r - g.shift, g.n), wire, bytes_of(out), op);
}

// The exchange path's all-gather, in place on buf: every rank's reduced physical chunk lands
// at its place in buf on every rank. `mine` holds this rank's chunk in its first elements and
// has room for the longest chunk: equal chunks are one all_gather straight into buf; uneven
// ones (numel not a multiple of N) travel padded to the longest chunk and are copied out.
void exchange_all_gather(const Ring& g, Tensor& mine, Tensor& buf) {
  const std::int64_t longest = ring_chunk(g.numel, g.n, 0).count;
  if (longest * g.n == g.numel) {
    g.comm->all_gather(mine, buf);
    return;
  }
  const std::int64_t count = ring_chunk(g.numel, g.n, g.r).count;
  if (count < longest) mine.flat_slice(count, longest - count).fill(0.0f);  // the padding
  RingScratch& s = ring_scratch();
  Tensor all = s.take(s.padded, longest * g.n, buf.dtype());
  g.comm->all_gather(mine, all);
  for (int p = 0; p < g.n; ++p) {
    const ChunkRange c = ring_chunk(g.numel, g.n, p);
    if (c.count > 0) view(buf, c).copy_from(all.flat_slice(p * longest, c.count));
  }
}

void check_blocks(const Tensor& big, const Tensor& small, int n, const char* what) {
  require_cpu(big, what);
  require_cpu(small, what);
  if (big.dtype() != small.dtype() || big.numel() != small.numel() * n) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(big.numel()) + " x " +
                                std::string(dtype_name(big.dtype())) + " for " +
                                std::to_string(n) + " ranks x " + std::to_string(small.numel()) +
                                " x " + std::string(dtype_name(small.dtype())));
  }
}

}  // namespace

int ring_owned_chunk(int rank, int size) { return (rank + 1) % size; }

std::size_t ring_oneshot_max_bytes(const RingOptions& opts, int ranks) {
  return opts.oneshot_max_bytes.value_or(ranks <= 2 ? RingOptions::kOneShotMaxBytesTwoRanks
                                                    : RingOptions::kOneShotMaxBytesMoreRanks);
}

void ring_all_reduce(Communicator& comm, Tensor& buf, ReduceOp op, const RingOptions& opts) {
  require_cpu(buf, "ring_all_reduce");
  if (comm.size() == 1 || buf.numel() == 0) return;
  const Ring g = make_ring(comm, buf.numel(), buf.dtype(), 0, opts);
  if (gathers(comm, comm.size(), buf, opts)) {
    // Logical chunk L starts at rank L and, shift 0, is physical chunk L.
    const std::byte* all = bytes_of(gather_all(comm, buf));
    const std::size_t elem = dtype_size(buf.dtype());
    for (int c = 0; c < g.n; ++c) {
      const ChunkRange r = g.chunk(c);
      reduce_in_ring_order(g, all, buf.dtype(), g.numel, r.begin, r.count, c,
                           wire_dtype(buf.dtype(), opts),
                           bytes_of(buf) + static_cast<std::size_t>(r.begin) * elem, op);
    }
    return;
  }
  if (reduction_exchanges(g, buf, opts, opts.exchange_max_bytes)) {
    RingScratch& gs = ring_scratch();
    Tensor mine = gs.take(gs.mine, ring_chunk(g.numel, g.n, 0).count, buf.dtype());
    Tensor reduced = mine.flat_slice(0, ring_chunk(g.numel, g.n, g.r).count);
    exchange_reduce_scatter(g, buf, reduced, op, wire_dtype(buf.dtype(), opts));
    exchange_all_gather(g, mine, buf);
    return;
  }
  Scratch s(g, wire_dtype(buf.dtype(), opts));
  // Slice by slice: slice j's all-gather needs only slice j of the owned chunk, so it follows
  // its reduce-scatter while the slice is still in cache.
  for (int j = 0; j < g.slices; ++j) {
    reduce_scatter_slice(g, j, buf, buf, 0, op, s, opts);
    all_gather_slice(g, j, buf, opts);
  }
}

void ring_reduce_scatter_inplace(Communicator& comm, Tensor& buf, ReduceOp op,
                                 const RingOptions& opts) {
  require_cpu(buf, "ring_reduce_scatter_inplace");
  if (comm.size() == 1 || buf.numel() == 0) return;
  const Ring g = make_ring(comm, buf.numel(), buf.dtype(), 0, opts);
  Scratch s(g, wire_dtype(buf.dtype(), opts));
  for (int j = 0; j < g.slices; ++j) reduce_scatter_slice(g, j, buf, buf, 0, op, s, opts);
}

namespace {

// A standalone all-gather on 2 ranks is one hop, and slices exist for the reduce-scatter's
// cache (see ring_all_reduce) and for pipelining longer rings: there they would only add
// hand-offs, and one whole message lets the backend stream a copy larger than the cache
// (local::copy_bytes). So it goes unsliced unless the caller asked for slices.
RingOptions gather_options(const Communicator& comm, const RingOptions& opts) {
  RingOptions o = opts;
  if (comm.size() == 2 && !o.slice_bytes) o.slice_bytes = 0;
  return o;
}

}  // namespace

void ring_all_gather_inplace(Communicator& comm, Tensor& buf, const RingOptions& options) {
  require_cpu(buf, "ring_all_gather_inplace");
  if (comm.size() == 1 || buf.numel() == 0) return;
  const RingOptions opts = gather_options(comm, options);
  const Ring g = make_ring(comm, buf.numel(), buf.dtype(), 0, opts);
  for (int j = 0; j < g.slices; ++j) all_gather_slice(g, j, buf, opts);
}

void ring_reduce_scatter(Communicator& comm, const Tensor& in, Tensor& out, ReduceOp op,
                         const RingOptions& opts) {
  check_blocks(in, out, comm.size(), "ring_reduce_scatter");
  if (comm.size() == 1) {
    out.copy_from(in);
    return;
  }
  if (out.numel() == 0) return;
  const Ring g = make_ring(comm, in.numel(), in.dtype(), -1, opts);
  // On 2 ranks the exchange's one all_to_all hands each rank the half it reduces, where the
  // gather path reads both whole inputs. Exchange / gather in us, three alternating runs (f32,
  // 2-core AMD EPYC, load 1.0-1.2; bench_collectives --impl ring --ranks 2 --ops
  // reduce-scatter, the gather path with --ring-exchange-max 0): 1 KiB 0.39-0.49 / 0.47-0.61,
  // 4 KiB 0.96-1.42 / 1.09-1.56, 16 KiB 2.2-2.9 / 3.3-4.7, 64 KiB 4.0-5.8 / 4.9-6.6; but
  // 8 B 0.28-0.38 / 0.23-0.30 and 128 B 0.30-0.40 / 0.24-0.33. So the exchange from 1 KiB.
  // On 4 ranks the gather path's all_gather stays faster at small sizes (8 B: 2.7 us against
  // 3.5), so from 3 ranks the exchange starts where the gather path ends.
  if (g.n == 2 && in.nbytes() >= kTwoRankExchangeMinBytes &&
      exchanges(in, opts, opts.reduce_scatter_exchange_max_bytes)) {
    exchange_reduce_scatter(g, in, out, op, wire_dtype(in.dtype(), opts));  // block r: chunk r
    return;
  }
  if (gathers(comm, comm.size(), in, opts)) {
    // Block r is logical chunk r + 1, which starts at rank r + 1.
    const Tensor& all = gather_all(comm, in);
    reduce_in_ring_order(g, bytes_of(all), in.dtype(), g.numel, g.chunk(g.r + 1).begin,
                         g.chunk(g.r + 1).count, mod(g.r + 1, g.n), wire_dtype(in.dtype(), opts),
                         bytes_of(out), op);
    return;
  }
  if (reduction_exchanges(g, in, opts, opts.reduce_scatter_exchange_max_bytes)) {
    exchange_reduce_scatter(g, in, out, op, wire_dtype(in.dtype(), opts));  // block r: chunk r
    return;
  }
  Scratch s(g, wire_dtype(in.dtype(), opts));
  const std::int64_t owned_begin = g.chunk(g.r + 1).begin;  // block r
  for (int j = 0; j < g.slices; ++j) reduce_scatter_slice(g, j, in, out, owned_begin, op, s, opts);
}

void ring_all_gather(Communicator& comm, const Tensor& in, Tensor& out,
                     const RingOptions& options) {
  check_blocks(out, in, comm.size(), "ring_all_gather");
  const RingOptions opts = gather_options(comm, options);
  if (comm.size() > 1 &&
      (gathers(comm, 1, out, opts) || exchanges(out, opts, opts.all_gather_exchange_max_bytes))) {
    comm.all_gather(in, out);  // copies: the hops' bits
    return;
  }
  Tensor mine = out.flat_slice(comm.rank() * in.numel(), in.numel());
  local::copy_bytes(bytes_of(mine), bytes_of(in), in.nbytes());  // streamed when large
  if (comm.size() == 1 || in.numel() == 0) return;
  const Ring g = make_ring(comm, out.numel(), out.dtype(), -1, opts);
  for (int j = 0; j < g.slices; ++j) all_gather_slice(g, j, out, opts);
}

void naive_all_reduce(Communicator& comm, Tensor& buf, ReduceOp op, const RingOptions& opts) {
  require_cpu(buf, "naive_all_reduce");
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || buf.numel() == 0) return;
  if (r != 0) {
    comm.send(buf, 0, opts.tag);
    comm.recv(buf, 0, opts.tag);
    record(opts, event("broadcast", 0, r, -1, 0, -1, -1), nullptr, &buf, &buf);
    return;
  }
  // Rank 0 adds the others' buffers in rank order, into an FP32 accumulator if asked.
  const bool wide = wire_dtype(buf.dtype(), opts) != buf.dtype();
  Tensor acc = buf;
  if (wide) {
    acc = Tensor::empty({buf.numel()}, DType::kF32, MemCategory::kCommBuffers);
    acc.copy_from(buf);
  }
  Tensor got = Tensor::empty({buf.numel()}, buf.dtype(), MemCategory::kCommBuffers);
  for (int src = 1; src < n; ++src) {
    comm.recv(got, src, opts.tag);
    hop_combine(acc, got, acc, op);
    record(opts, event("reduce", src - 1, 0, -1, src, -1, -1), nullptr, &got, &acc);
  }
  if (wide) buf.copy_from(acc, Saturation::kNoSat);
  for (int dst = 1; dst < n; ++dst) comm.send(buf, dst, opts.tag);
}

std::string algo_name(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::kBackend: return "backend";
    case AllReduceAlgo::kRing: return "ring";
    case AllReduceAlgo::kNaive: return "naive";
  }
  return "?";
}

void all_reduce_with(AllReduceAlgo algo, Communicator& comm, Tensor& buf, ReduceOp op,
                     const RingOptions& opts) {
  switch (algo) {
    case AllReduceAlgo::kBackend: comm.all_reduce(buf, op); return;
    case AllReduceAlgo::kRing: ring_all_reduce(comm, buf, op, opts); return;
    case AllReduceAlgo::kNaive: naive_all_reduce(comm, buf, op, opts); return;
  }
}

}  // namespace mixpar::ch04
