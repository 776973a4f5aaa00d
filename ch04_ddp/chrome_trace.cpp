// Chrome trace JSON by hand: the format is a flat list of events, and names are ours (no
// characters to escape but quotes and backslashes, handled anyway).
#include "chrome_trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

#include "io/atomic_file.h"

namespace mixpar::ch04 {
namespace {

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') q += '\\';
    q += ch;
  }
  q += '"';
  return q;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string metadata(const char* what, int pid, int tid, const std::string& name) {
  return std::string("{\"name\":\"") + what + "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + quoted(name) + "}}";
}

}  // namespace

double trace_now_us() {
  const auto t = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration<double, std::micro>(t).count();
}

std::string chrome_trace_json(std::span<const TraceSpan> spans) {
  double origin = std::numeric_limits<double>::infinity();
  for (const TraceSpan& s : spans) origin = std::min(origin, s.start_us);
  std::set<std::pair<int, int>> rows;
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  const auto add = [&](const std::string& event) {
    out += first ? "\n" : ",\n";
    out += event;
    first = false;
  };
  for (const TraceSpan& s : spans) {
    rows.insert({s.rank, s.thread});
    add("{\"name\":" + quoted(s.name) + ",\"cat\":" + quoted(s.cat) +
        ",\"ph\":\"X\",\"pid\":" + std::to_string(s.rank) + ",\"tid\":" +
        std::to_string(s.thread) + ",\"ts\":" + number(s.start_us - origin) +
        ",\"dur\":" + number(s.dur_us) + "}");
  }
  for (const auto& [rank, thread] : rows) {
    add(metadata("process_name", rank, thread, "rank " + std::to_string(rank)));
    add(metadata("thread_name", rank, thread, thread == 0 ? "compute" : "communication"));
  }
  out += "\n]}\n";
  return out;
}

void write_chrome_trace(const std::string& path, std::span<const TraceSpan> spans) {
  write_file_atomic(path, chrome_trace_json(spans));
}

}  // namespace mixpar::ch04
