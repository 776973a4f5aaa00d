// Chrome trace JSON by hand: the format is a flat list of events, and names are ours (no
// characters to escape but quotes and backslashes, handled anyway).
#include "trace/chrome_trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "io/atomic_file.h"

namespace mixpar {
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

// A span per line, fields separated by the ASCII unit separator (never in our names).
constexpr char kSep = '\x1f';

std::string serialize(const std::vector<TraceSpan>& spans) {
  std::string text;
  char times[96];
  for (const TraceSpan& s : spans) {
    std::snprintf(times, sizeof times, "%d%c%d%c%.17g%c%.17g", s.rank, kSep, s.thread, kSep,
                  s.start_us, kSep, s.dur_us);
    text += s.name + kSep + s.cat + kSep + times + '\n';
  }
  return text;
}

std::vector<TraceSpan> deserialize(const std::string& text) {
  std::vector<TraceSpan> spans;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, kSep);) f.push_back(field);
    if (f.size() != 6) throw CommError("gather_spans: a malformed span arrived: " + line);
    spans.push_back({f[0], f[1], std::stoi(f[2]), std::stoi(f[3]), std::stod(f[4]),
                     std::stod(f[5])});
  }
  return spans;
}

// Text travels as raw bytes in 8-byte elements (the communicator has no byte dtype): first
// the length, then the bytes padded to a multiple of 8.
void send_text(Communicator& comm, const std::string& text, int dst) {
  Tensor len = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  len.data_as<double>()[0] = static_cast<double>(text.size());
  comm.send(len, dst);
  Tensor bytes = Tensor::zeros({static_cast<std::int64_t>((text.size() + 7) / 8)}, DType::kF64,
                               MemCategory::kCommBuffers);
  if (!text.empty()) std::memcpy(bytes.data(), text.data(), text.size());
  comm.send(bytes, dst);
}

std::string recv_text(Communicator& comm, int src) {
  Tensor len = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  comm.recv(len, src);
  const auto n = static_cast<std::size_t>(len.data_as<double>()[0]);
  Tensor bytes = Tensor::empty({static_cast<std::int64_t>((n + 7) / 8)}, DType::kF64,
                               MemCategory::kCommBuffers);
  comm.recv(bytes, src);
  if (n == 0) return {};
  return std::string(static_cast<const char*>(bytes.data()), n);
}

}  // namespace

std::vector<TraceSpan> gather_spans(Communicator& comm, std::vector<TraceSpan> mine) {
  if (comm.rank() != 0) {
    send_text(comm, serialize(mine), 0);
    return {};
  }
  for (int r = 1; r < comm.size(); ++r) {
    for (TraceSpan& s : deserialize(recv_text(comm, r))) mine.push_back(std::move(s));
  }
  return mine;
}

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

}  // namespace mixpar
