// The fabric's failures and what it reports about them: aborting a run, the deadlock check,
// where each rank is, the groups' names and the messages never received.
#include "comm/local_fabric.h"

#include <string>
#include <vector>

#include "comm/local_fabric_waits.h"
#include "comm/local_oneshot.h"

namespace mixpar::local {

using detail::count_str;
using detail::exception_text;
using detail::rank_list;

// ---- Aborting, and the reports

void Fabric::throw_if_aborted() const {
  if (aborted_) throw_aborted();
}

void Fabric::throw_aborted() const {
  if (watchdog_fired_) throw CommWatchdogTimeout(reason_);
  throw CommError(reason_);
}

void Fabric::fail(std::string reason) {
  abort(std::move(reason));
  throw_aborted();  // the first reason, if the world had already failed
}

// The root and every lane fail together: a rank's compute thread may wait on the root while
// its lane's thread waits on the lane, and either must wake to the other's failure.
void Fabric::abort(std::string reason) {
  if (aborted_) return;
  Fabric& root = root_ ? *root_ : *this;
  const bool watchdog = watchdog_fired_;
  root.abort_here(reason, watchdog);
  for (const std::unique_ptr<Fabric>& lane : root.lanes_) lane->abort_here(reason, watchdog);
}

void Fabric::abort_here(const std::string& reason, bool watchdog) {
  if (aborted_) return;
  aborted_ = true;
  reason_ = reason;
  watchdog_fired_ = watchdog;
  for (int r = 0; r < world_size(); ++r) wake(r);
}

void Fabric::check_deadlock() {
  if (aborted_) return;
  bool any_live = false;
  for (int r = 0; r < world_size(); ++r) {
    const Phase p = status_[static_cast<std::size_t>(r)].phase;
    if (p == Phase::kFinished || p == Phase::kFailed) continue;
    if (!stuck(r)) return;
    any_live = true;
  }
  if (any_live) {
    abort("deadlock: every unfinished rank waits in the communicator and nothing in flight "
          "can release any of them; " + report());
  }
}

bool Fabric::stuck(int rank) const {
  const RankStatus& s = status_[static_cast<std::size_t>(rank)];
  if (s.phase == Phase::kRecv) {
    const MailKey key{s.group, s.peer, rank, s.tag};
    return mail_.count(key) == 0 && !in_channel(key);
  }
  if (s.phase == Phase::kSend) {
    if (s.slot) return s.slot->state.load(std::memory_order_acquire) == kSlotFull;
    return !taken({s.group, rank, s.peer, s.tag}, s.message);
  }
  if (s.phase != Phase::kCollective) return false;
  const Group& g = groups_[static_cast<std::size_t>(s.group)];
  if (s.oneshot) return !g.oneshot->all_published(s.seq);
  const auto it = g.slots.find(s.seq);
  return it != g.slots.end() && it->second->arrived < static_cast<int>(g.members.size());
}

std::string Fabric::where(int rank) const {
  const RankStatus& s = status_[static_cast<std::size_t>(rank)];
  const std::string who = "rank " + std::to_string(named(rank));
  const std::string call = " (call #" + std::to_string(s.seq) + " of " + group_name(s.group) + ")";
  switch (s.phase) {
    case Phase::kComputing: return who + " is computing (not in the communicator)";
    case Phase::kFinished: return who + " has finished";
    case Phase::kFailed: return who + " has failed";
    case Phase::kCompleting: return who + " is completing " + s.desc.str() + call;
    case Phase::kSend:
    case Phase::kRecv:
      return who + " waits in " + (s.phase == Phase::kSend ? "send(to " : "recv(from ") +
             std::to_string(named(s.peer)) + ", tag " + std::to_string(s.tag) + ", " +
             count_str(s.count, s.dtype) + ")" +
             (s.group == 0 && !root_ ? "" : " in " + group_name(s.group));
    case Phase::kCollective: break;
  }
  const Group& g = groups_[static_cast<std::size_t>(s.group)];
  std::vector<int> absent;
  const auto it = g.slots.find(s.seq);
  for (std::size_t k = 0; k < g.members.size(); ++k) {
    const bool missing = s.oneshot ? !g.oneshot->published(static_cast<int>(k), s.seq)
                                   : it != g.slots.end() && !it->second->arrivals[k];
    if (missing) absent.push_back(named(g.members[k]));
  }
  return who + " waits in " + s.desc.str() + call +
         (absent.empty() ? "" : " for " + rank_list(absent));
}

std::string Fabric::report() const {
  std::string out;
  for (int r = 0; r < world_size(); ++r) out += (r ? "; " : "") + where(r);
  return out;
}

// A lane's groups by the root's world ranks: "group {0, 2} (a dup, on a lane of its own)".
std::string Fabric::group_name(int group) const {
  if (group == 0 && !root_) return "world";
  const std::vector<int>& m = groups_[static_cast<std::size_t>(group)].members;
  std::string s = "group {";
  for (std::size_t i = 0; i < m.size(); ++i) s += (i ? ", " : "") + std::to_string(named(m[i]));
  return s + (root_ ? "} (a dup, on a lane of its own)" : "}");
}

std::string Fabric::undelivered() const {
  std::string msg = "messages sent but never received:";
  for (const auto& [key, queue] : mail_) {
    const auto& [group, src, dst, tag] = key;
    msg += (msg.back() == ':' ? " rank " : "; rank ") + std::to_string(named(src)) + " sent " +
           std::to_string(queue.size()) + " message(s) to rank " + std::to_string(named(dst)) +
           " (tag " + std::to_string(tag) + ")" +
           (group == 0 && !root_ ? "" : " in " + group_name(group));
  }
  return msg;
}

}  // namespace mixpar::local
