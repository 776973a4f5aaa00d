// LocalCommunicator's sends and receives (its collectives: local_backend.cpp).
#include <stdexcept>
#include <string>

#include "comm/local_backend.h"
#include "comm/local_checks.h"
#include "comm/local_fabric.h"
#include "comm/local_kernels.h"

namespace mixpar {

using local::bytes_of;
using local::require_defined;
using local::require_disjoint;

// ---- Point to point
//
// An eager send() copies the message into the network's memory and returns: MPI's eager
// protocol. Up to the eager limit that memory is a slot of the pair's fast channel
// (comm/local_channel.h), reused from message to message; a larger message, or one that finds
// the channel's slots all in flight, is a fresh copy in the mailbox. A synchronous send() and
// a sendrecv() above the eager limit lend the sender's own buffer instead, MPI's rendezvous
// protocol: the receiver copies straight out of it and the sender returns once it has, so
// each byte is copied once, not twice. Device tensors go through a host copy.

void LocalCommunicator::post(const Tensor& host, bool staged, int to, int tag) {
  if (host.nbytes() <= fabric_->eager_limit_bytes() &&
      fabric_->post_inline(group_, world_rank(), to, tag, host)) {
    return;
  }
  fabric_->post(group_, world_rank(), to, tag, staged ? host : host_copy(host));
}

void LocalCommunicator::send(const Tensor& t, int dst, int tag) {
  require_defined(t, "send");
  const int to = world_peer(dst, "send");
  const Tensor host = t.is_cpu() ? t : host_copy(t);
  if (fabric_->synchronous_sends()) {
    const local::Fabric::Loan loan = fabric_->lend(group_, world_rank(), to, tag, host);
    fabric_->await_copied(group_, world_rank(), to, tag, loan);
  } else {
    post(host, !t.is_cpu(), to, tag);
  }
  traffic_.record("send", t.nbytes(), 0);
}

void LocalCommunicator::receive_into(Tensor& t, int src, int tag) {
  require_defined(t, "recv");
  const int from = world_peer(src, "recv");
  if (!t.is_cpu()) {
    Tensor h = host_buffer_like(t);
    receive_into(h, src, tag);
    t.copy_from(h);
    return;
  }
  const local::Delivery d = fabric_->take(group_, from, world_rank(), tag, t.numel(), t.dtype());
  local::copy_bytes(bytes_of(t), d.data(), t.nbytes());
}

bool LocalCommunicator::sends_wait_for_receiver() const { return fabric_->synchronous_sends(); }

void LocalCommunicator::recv(Tensor& t, int src, int tag) {
  receive_into(t, src, tag);
  traffic_.record("recv", 0, t.nbytes());
}

bool LocalCommunicator::eager(const Tensor& message) const {
  return !fabric_->synchronous_sends() && message.nbytes() <= fabric_->eager_limit_bytes();
}

// Sends send_t (a host tensor) to dst, takes src's message and lets use(bytes) read it in
// place. A small message is posted as a copy; a large one is lent, and this waits until dst
// has read it. Sending before receiving, and waiting for our receiver only after, is what
// makes a ring of these safe: every message is out before anyone waits. Leaving on an
// exception withdraws the loan first, so no one reads a freed buffer.
template <class Use>
void LocalCommunicator::exchange(const Tensor& send_t, int dst, int src, int tag,
                                 std::int64_t count, DType dtype, Use&& use) {
  const int to = world_peer(dst, "sendrecv");
  const int from = world_peer(src, "sendrecv");
  if (eager(send_t)) {
    post(send_t, false, to, tag);
    const local::Delivery d = fabric_->take(group_, from, world_rank(), tag, count, dtype);
    use(d.data());
    return;
  }
  const local::Fabric::Loan loan = fabric_->lend(group_, world_rank(), to, tag, send_t);
  try {
    const local::Delivery d = fabric_->take(group_, from, world_rank(), tag, count, dtype);
    use(d.data());
  } catch (...) {
    fabric_->withdraw(group_, world_rank(), to, tag, loan);
    throw;
  }
  fabric_->await_copied(group_, world_rank(), to, tag, loan);
}

void LocalCommunicator::sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag) {
  require_defined(send_t, "sendrecv");
  require_defined(recv_t, "sendrecv");
  require_disjoint(send_t, recv_t, "sendrecv");
  const Tensor host_send = send_t.is_cpu() ? send_t : host_copy(send_t);
  Tensor host_recv = recv_t.is_cpu() ? recv_t : host_buffer_like(recv_t);
  exchange(host_send, dst, src, tag, host_recv.numel(), host_recv.dtype(),
           [&](const std::byte* data) {
             local::copy_bytes(bytes_of(host_recv), data, host_recv.nbytes());
           });
  if (!recv_t.is_cpu()) recv_t.copy_from(host_recv);
  traffic_.record("sendrecv", send_t.nbytes(), recv_t.nbytes());
}

void LocalCommunicator::sendrecv_reduce(const Tensor& send_t, int dst, Tensor& recv_t, int src,
                                        const Tensor& own, Tensor& out, ReduceOp op, int tag) {
  require_defined(send_t, "sendrecv_reduce");
  check_reduce_hop(recv_t, own, out);
  if (!send_t.is_cpu()) {
    throw std::invalid_argument("sendrecv_reduce: the reduction runs on host tensors");
  }
  require_disjoint(send_t, out, "sendrecv_reduce");  // dst reads one while we write the other
  exchange(send_t, dst, src, tag, recv_t.numel(), recv_t.dtype(), [&](const std::byte* data) {
    local::combine_elements(data, recv_t.dtype(), bytes_of(own), own.dtype(), bytes_of(out),
                            out.dtype(), out.numel(), op);
  });
  traffic_.record("sendrecv", send_t.nbytes(), recv_t.nbytes());
}

}  // namespace mixpar
