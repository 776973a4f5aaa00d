// Formatting of the training signals. Memory comes from the ledger, which every tensor's
// allocation goes through, so the numbers are what the process holds, not an estimate.
#include "train_log.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "io/atomic_file.h"
#include "util/errors.h"

namespace mixpar::ch08 {

MemorySnapshot memory_snapshot(const MemoryLedger& ledger) {
  MemorySnapshot m;
  for (MemCategory c : kAllMemCategories) m.live[static_cast<std::size_t>(c)] = ledger.live(c);
  m.peak_total = ledger.peak_total();
  for (MemCategory c : kAllMemCategories) m.host_live[static_cast<std::size_t>(c)] = ledger.host_live(c);
  m.host_peak_total = ledger.host_peak_total();
  return m;
}

namespace {

Json bytes_by_category(const std::array<std::size_t, kNumMemCategories>& live) {
  Json bytes = Json::object();
  for (MemCategory c : kAllMemCategories) {
    bytes.set(category_name(c), static_cast<std::int64_t>(live[static_cast<std::size_t>(c)]));
  }
  return bytes;
}

}  // namespace

Json step_json(const StepStats& s, const MemorySnapshot& mem,
               std::optional<double> heldout_accuracy, std::span<const RankMetrics> by_rank,
               std::optional<double> val_loss) {
  Json j = Json::object();
  j.set("step", s.step);
  j.set("loss", s.loss);
  j.set("grad_norm", s.grad_norm);
  j.set("clip_coef", s.clip_coef);
  j.set("lr", s.lr);
  j.set("loss_scale", static_cast<double>(s.loss_scale));
  j.set("skipped", s.skipped);
  j.set("tokens_per_s", s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0);
  j.set("step_ms", s.seconds * 1e3);
  j.set("data_position", s.data_position);
  j.set("flops", s.flops);
  if (s.mfu > 0) j.set("mfu", s.mfu);
  j.set("epoch", s.epoch);
  if (!s.fp8.is_null()) j.set("fp8", s.fp8);
  if (!s.moe.is_null()) j.set("moe", s.moe);
  if (s.ranks > 0) {
    // Rank 0's view of the step: compute, all communication, and the part of it compute
    // waited for (the rest overlapped backward).
    j.set("ranks", static_cast<std::int64_t>(s.ranks));
    j.set("compute_ms", s.times.compute_s * 1e3);
    j.set("comm_ms", s.times.comm_s * 1e3);
    j.set("exposed_comm_ms", s.times.exposed_s * 1e3);
    j.set("comm_ms_by_group", group_times_json(s.group_times));
  }
  j.set("mem_bytes", bytes_by_category(mem.live));
  j.set("mem_peak_bytes", static_cast<std::int64_t>(mem.peak_total));
  if (mem.host_peak_total > 0) {  // keys only where bytes were billed to the host
    j.set("host_mem_bytes", bytes_by_category(mem.host_live));
    j.set("host_mem_peak_bytes", static_cast<std::int64_t>(mem.host_peak_total));
  }
  if (!by_rank.empty()) {
    Json mem_by_rank = Json::array(), comm_by_rank = Json::array(), host_by_rank = Json::array();
    bool host = false;
    for (const RankMetrics& r : by_rank) {
      mem_by_rank.push_back(bytes_by_category(r.mem));
      comm_by_rank.push_back(static_cast<std::int64_t>(r.comm_bytes_sent));
      host_by_rank.push_back(bytes_by_category(r.host_mem));
      host = host || r.host_mem_peak > 0;
    }
    j.set("mem_bytes_by_rank", std::move(mem_by_rank));
    j.set("comm_bytes_by_rank", std::move(comm_by_rank));
    if (host) j.set("host_mem_bytes_by_rank", std::move(host_by_rank));
  }
  if (s.ranks > 0) {
    Json groups = Json::object();
    for (const auto& [name, bytes] : s.group_bytes.by_group) {
      groups.set(name, static_cast<std::int64_t>(bytes));
    }
    j.set("comm_bytes_by_group", std::move(groups));
  }
  if (heldout_accuracy) j.set("heldout_accuracy", *heldout_accuracy);
  if (val_loss) j.set("val_loss", *val_loss);
  return j;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return buf;
}

std::string escape_bytes(const std::string& bytes) {
  std::string out;
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    if (b == '\\') {
      out += "\\\\";
    } else if (b == '\n') {
      out += "\\n";
    } else if (b == '\t') {
      out += "\\t";
    } else if (b >= 0x20 && b < 0x7f) {
      out += ch;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out += hex;
    }
  }
  return out;
}

std::string format_rate(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string progress_line(const StepStats& s, std::int64_t total_steps, bool show_scale,
                          double eta_seconds) {
  const int width = static_cast<int>(std::to_string(total_steps).size());
  const double tps = s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %*lld/%lld | loss %.4f | norm %.3f | lr %.2e | %s tok/s",
                width, static_cast<long long>(s.step), static_cast<long long>(total_steps), s.loss,
                s.grad_norm, s.lr, format_rate(tps).c_str());
  std::string line = buf;
  if (s.mfu > 0) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", 100.0 * s.mfu);
    line += buf;
  }
  if (show_scale) {
    const double scale = s.loss_scale;  // whole numbers in full: 4194304, not 4.1943e+06
    std::snprintf(buf, sizeof buf, scale >= 1 ? " | scale %.0f" : " | scale %g", scale);
    line += buf;
  }
  if (s.ranks > 0) {
    std::snprintf(buf, sizeof buf, " | compute %.0f ms, comm %.1f ms (%.1f exposed)",
                  s.times.compute_s * 1e3, s.times.comm_s * 1e3, s.times.exposed_s * 1e3);
    line += buf;
    const std::string by_group = group_times_text(s.group_times);
    if (!by_group.empty()) line += ": " + by_group;
  }
  if (!s.moe.is_null()) {
    // The MoE blocks' worst: the largest dropped fraction and max / mean load of the step.
    double dropped = 0, load = 0;
    const Json& blocks = s.moe.at("blocks");
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      dropped = std::max(dropped, blocks.at(b).at("dropped_frac").as_double());
      load = std::max(load, blocks.at(b).at("load_max_over_mean").as_double());
    }
    std::snprintf(buf, sizeof buf, " | moe dropped %.1f%%, load max/mean %.2f", 100.0 * dropped,
                  load);
    line += buf;
  }
  if (s.skipped) line += " | SKIPPED (inf/nan)";
  return line + " | ETA " + format_duration(eta_seconds);
}

void EtaClock::add(double seconds) {
  // The first step pays for allocations and cold caches: the mean restarts after it.
  avg_ = n_ <= 1 ? seconds : 0.9 * avg_ + 0.1 * seconds;
  ++n_;
}

double EtaClock::eta(std::int64_t steps_left) const {
  return avg_ * static_cast<double>(steps_left);
}

namespace {

// The lines of an existing log whose "step" is at most `step`, and the records of background
// checkpoints ("checkpoint") up to it (others, and lines that do not parse, belong to the
// interrupted run after its checkpoint).
std::string lines_up_to(const std::string& path, std::int64_t step) {
  if (!std::filesystem::exists(path)) return {};
  std::istringstream in(read_file(path));
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      const Json j = Json::parse(line, path);
      const char* key = j.is_object() && j.contains("checkpoint") ? "checkpoint" : "step";
      if (j.is_object() && j.contains(key) && j.at(key).as_int() <= step) kept += line + "\n";
    } catch (const InputError&) {
      // a torn last line from a crash: dropped
    }
  }
  return kept;
}

}  // namespace

JsonlLog::JsonlLog(const std::string& path, std::optional<std::int64_t> resume_step) : path_(path) {
  write_file_atomic(path, resume_step ? lines_up_to(path, *resume_step) : std::string());
  out_.open(path, std::ios::app);
  if (!out_) throw InputError(path + ": cannot open for writing");
}

void JsonlLog::write(const Json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  // The reason, as the system gives it ("No space left on device", "File too large").
  if (!out_) throw InputError(path_ + ": write failed: " + std::strerror(errno));
}

}  // namespace mixpar::ch08
