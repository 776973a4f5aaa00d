#include "comm_times.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace mixpar::ch08 {

namespace {

// The order the log lists groups in: the layers' collectives first, then the step's.
constexpr const char* kOrder[] = {"tp", "cp", "ep", "pp",    "embedding",
                                  "dp", "edp", "world", "model_parallel"};

std::size_t rank_of(const std::string& name) {
  for (std::size_t i = 0; i < std::size(kOrder); ++i) {
    if (name == kOrder[i]) return i;
  }
  return std::size(kOrder);
}

}  // namespace

std::string group_of_clock_name(const std::string& clock_name) {
  std::string name = clock_name.substr(0, clock_name.find('.'));
  return name == "dp_cp" ? "dp" : name;
}

double pp_receive_wait(const CommTimes& pp_step,
                       const std::map<std::string, TrafficTotals>& bytes) {
  const auto sent = [&](const char* op) {
    const auto it = bytes.find(op);
    return it == bytes.end() ? 0.0 : static_cast<double>(it->second.bytes_sent);
  };
  const auto received = [&](const char* op) {
    const auto it = bytes.find(op);
    return it == bytes.end() ? 0.0 : static_cast<double>(it->second.bytes_received);
  };
  double recv_s = 0;
  for (const auto& [group, ops] : pp_step.by_group) {
    for (const auto& [op, t] : ops) {
      if (op == "recv" || op == "sendrecv") recv_s += t.owner_s + t.other_s;
    }
  }
  double send_s = 0;
  for (const auto& [group, ops] : pp_step.by_group) {
    const auto it = ops.find("send");
    if (it != ops.end()) send_s += it->second.owner_s + it->second.other_s;
  }
  // Seconds per byte of a transfer, from the sends (a copy each); with no send to measure, all
  // of a receive counts as transfer (nothing is claimed as bubble).
  const double send_bytes = sent("send");
  if (send_bytes <= 0 || send_s <= 0) return 0.0;
  const double transfer = (received("recv") + received("sendrecv")) * (send_s / send_bytes);
  return std::clamp(recv_s - transfer, 0.0, recv_s);
}

std::vector<GroupTime> step_group_times(const CommTimes& step, double sync_wait_s,
                                        const std::map<std::string, TrafficTotals>& pp_bytes) {
  std::vector<GroupTime> out;
  const auto at = [&](const std::string& name) -> GroupTime& {
    for (GroupTime& g : out) {
      if (g.name == name) return g;
    }
    GroupTime g;
    g.name = name;
    out.push_back(std::move(g));
    return out.back();
  };
  CommTimes pp_step;
  for (const auto& [clock_name, ops] : step.by_group) {
    const std::string name = group_of_clock_name(clock_name);
    const CommTime t = step.group(clock_name);
    GroupTime& g = at(name);
    g.busy_s += t.owner_s + t.other_s;
    g.exposed_s += t.owner_s;
    for (const auto& [op, o] : ops) {
      CommTime& into = g.ops[op];
      into.calls += o.calls;
      into.owner_s += o.owner_s;
      into.other_s += o.other_s;
    }
    if (name == "pp") pp_step.by_group[clock_name] = ops;
  }
  if (sync_wait_s > 0) {
    // The wait holds finish()'s own bookkeeping too (unpacking buckets, the average's
    // division), which is compute: the compute thread cannot wait for dp's communication
    // longer than that communication took, so exposed is at most busy.
    GroupTime& dp = at("dp");
    dp.exposed_s = std::min(dp.busy_s, dp.exposed_s + sync_wait_s);
  }
  if (!pp_step.by_group.empty()) at("pp").waiting_s = pp_receive_wait(pp_step, pp_bytes);
  std::stable_sort(out.begin(), out.end(), [](const GroupTime& a, const GroupTime& b) {
    return rank_of(a.name) < rank_of(b.name);
  });
  return out;
}

std::string group_times_text(const std::vector<GroupTime>& groups) {
  // pp's line holds its embedding group's time too (the tied wte's sum between the ends).
  double emb_busy = 0, emb_exposed = 0;
  for (const GroupTime& g : groups) {
    if (g.name == "embedding") {
      emb_busy = g.busy_s;
      emb_exposed = g.exposed_s;
    }
  }
  std::string out;
  char buf[96];
  for (const GroupTime& g : groups) {
    if (g.name == "embedding") continue;
    double busy = g.busy_s, exposed = g.exposed_s;
    if (g.name == "pp") {
      busy += emb_busy;
      exposed += emb_exposed;
    }
    if (busy <= 0 && exposed <= 0) continue;
    std::snprintf(buf, sizeof buf, "%s%s %.1f ms", out.empty() ? "" : ", ", g.name.c_str(),
                  busy * 1e3);
    out += buf;
    if (g.name == "pp") {
      std::snprintf(buf, sizeof buf, " (%.1f waiting)", g.waiting_s * 1e3);
      out += buf;
    } else if (exposed < busy * 0.999) {  // some of it overlapped: say how much did not
      std::snprintf(buf, sizeof buf, " (%.1f exposed)", exposed * 1e3);
      out += buf;
    }
  }
  return out;
}

Json group_times_json(const std::vector<GroupTime>& groups) {
  Json j = Json::object();
  for (const GroupTime& g : groups) {
    Json e = Json::object();
    e.set("ms", g.busy_s * 1e3);
    e.set("exposed_ms", g.exposed_s * 1e3);
    if (g.name == "pp") e.set("waiting_ms", g.waiting_s * 1e3);
    Json ops = Json::object();
    for (const auto& [op, t] : g.ops) {
      Json o = Json::object();
      o.set("calls", t.calls);
      o.set("ms", (t.owner_s + t.other_s) * 1e3);
      o.set("exposed_ms", t.owner_s * 1e3);
      ops.set(op, std::move(o));
    }
    e.set("ops", std::move(ops));
    j.set(g.name, std::move(e));
  }
  return j;
}

}  // namespace mixpar::ch08
