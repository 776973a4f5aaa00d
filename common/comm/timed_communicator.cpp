#include "comm/timed_communicator.h"

#include <chrono>

namespace mixpar {

namespace {

void add_into(CommTime& to, const CommTime& from, double sign) {
  to.calls += static_cast<std::int64_t>(sign) * from.calls;
  to.owner_s += sign * from.owner_s;
  to.other_s += sign * from.other_s;
}

}  // namespace

CommTime CommTimes::group(const std::string& name) const {
  CommTime out;
  const auto g = by_group.find(name);
  if (g == by_group.end()) return out;
  for (const auto& [op, t] : g->second) add_into(out, t, 1.0);
  return out;
}

CommTime CommTimes::op(const std::string& group_name, const std::string& op_name) const {
  const auto g = by_group.find(group_name);
  if (g == by_group.end()) return {};
  const auto o = g->second.find(op_name);
  return o == g->second.end() ? CommTime{} : o->second;
}

double CommTimes::owner_total() const {
  double s = 0;
  for (const auto& [name, ops] : by_group) s += group(name).owner_s;
  return s;
}

CommTimes CommTimes::since(const CommTimes& before) const {
  CommTimes out = *this;
  for (const auto& [name, ops] : before.by_group) {
    for (const auto& [op, t] : ops) add_into(out.by_group[name][op], t, -1.0);
  }
  return out;
}

void CommClock::add(const std::string& group, const char* op, double seconds) {
  const bool owner = std::this_thread::get_id() == owner_;
  const std::lock_guard<std::mutex> lock(mu_);
  CommTime& t = times_.by_group[group][op];
  ++t.calls;
  (owner ? t.owner_s : t.other_s) += seconds;
}

CommTimes CommClock::snapshot() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return times_;
}

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner, CommClock& clock,
                                     std::string group)
    : owned_(std::move(inner)), inner_(owned_.get()), clock_(&clock), group_(std::move(group)) {}

TimedCommunicator::TimedCommunicator(Communicator& inner, CommClock& clock, std::string group)
    : inner_(&inner), clock_(&clock), group_(std::move(group)) {}

template <class F>
decltype(auto) TimedCommunicator::timed(const char* op, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Stop {  // records on the way out of a call that returned (a void call too)
    TimedCommunicator* self;
    const char* op;
    std::chrono::steady_clock::time_point t0;
    ~Stop() {
      if (std::uncaught_exceptions() > 0) return;
      self->clock_->add(self->group_, op,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } stop{this, op, t0};
  return f();
}

void TimedCommunicator::send(const Tensor& t, int dst, int tag) {
  timed("send", [&] { inner_->send(t, dst, tag); });
}
void TimedCommunicator::recv(Tensor& t, int src, int tag) {
  timed("recv", [&] { inner_->recv(t, src, tag); });
}
void TimedCommunicator::sendrecv(const Tensor& send_t, int dst, Tensor& recv_t, int src, int tag) {
  timed("sendrecv", [&] { inner_->sendrecv(send_t, dst, recv_t, src, tag); });
}
void TimedCommunicator::sendrecv_reduce(const Tensor& send_t, int dst, Tensor& recv_t, int src,
                                        const Tensor& own, Tensor& out, ReduceOp op, int tag) {
  // Named as its traffic is ("sendrecv").
  timed("sendrecv", [&] { inner_->sendrecv_reduce(send_t, dst, recv_t, src, own, out, op, tag); });
}
void TimedCommunicator::barrier() {
  timed("barrier", [&] { inner_->barrier(); });
}
void TimedCommunicator::broadcast(Tensor& t, int root) {
  timed("broadcast", [&] { inner_->broadcast(t, root); });
}
void TimedCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  timed("all_reduce", [&] { inner_->all_reduce(t, op); });
}
void TimedCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  timed("reduce_scatter", [&] { inner_->reduce_scatter(in, out, op); });
}
void TimedCommunicator::all_gather(const Tensor& in, Tensor& out) {
  timed("all_gather", [&] { inner_->all_gather(in, out); });
}
void TimedCommunicator::all_to_all(const Tensor& in, std::span<const std::int64_t> send_counts,
                                   Tensor& out, std::span<const std::int64_t> recv_counts) {
  timed("all_to_all", [&] { inner_->all_to_all(in, send_counts, out, recv_counts); });
}
bool TimedCommunicator::all_reduce_or(bool flag) {
  return timed("all_reduce_or", [&] { return inner_->all_reduce_or(flag); });
}
void TimedCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
  timed("broadcast_bytes", [&] { inner_->broadcast_bytes(bytes, root); });
}
void TimedCommunicator::all_gather_bytes(std::span<const std::byte> in, std::span<std::byte> out) {
  timed("all_gather_bytes", [&] { inner_->all_gather_bytes(in, out); });
}
std::unique_ptr<Communicator> TimedCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> c = timed("split", [&] { return inner_->split(color, key); });
  if (!c) return c;
  return std::make_unique<TimedCommunicator>(std::move(c), *clock_, group_ + ".split");
}

std::unique_ptr<Communicator> TimedCommunicator::dup() {
  std::unique_ptr<Communicator> c = timed("split", [&] { return inner_->dup(); });
  if (!c) return nullptr;
  return std::make_unique<TimedCommunicator>(std::move(c), *clock_, group_);
}

}  // namespace mixpar
