// What a rank's step sent and holds, for the log: the bytes each group sent (GroupBytes; the
// world, the grid's groups, ZeRO-3's gathers and the MoE blocks' groups, each under the
// dimension it serves), and every rank's memory and bytes gathered in one all-gather.
#include "trainer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mixpar::ch08 {

void GroupBytes::add(const std::string& name, std::uint64_t bytes) {
  for (auto& [group, sent] : by_group) {
    if (group == name) {
      sent += bytes;
      return;
    }
  }
  by_group.emplace_back(name, bytes);
}

std::uint64_t GroupBytes::total() const {
  std::uint64_t n = 0;
  for (const auto& g : by_group) n += g.second;
  return n;
}

GroupBytes GroupBytes::since(const GroupBytes& before) const {
  GroupBytes out = *this;
  for (std::size_t g = 0; g < out.by_group.size() && g < before.by_group.size(); ++g) {
    out.by_group[g].second -= before.by_group[g].second;
  }
  return out;
}

GroupBytes Trainer::group_bytes_so_far() const {
  GroupBytes out;
  if (!grid_) return out;
  out.add("world", grid_->world().traffic().total().bytes_sent);
  // Context parallel: the loss mean over dp x cp counts as dp's (the cp group's own bytes are
  // "cp": attention and the gradient sums).
  for (const auto& [name, comm] : grid_->groups()) {
    out.add(name == "dp_cp" ? "dp" : name, comm ? comm->traffic().total().bytes_sent : 0);
  }
  if (dp_lane_) out.add("dp", dp_lane_->traffic().total().bytes_sent);  // the buckets' dup
  if (sync_) out.add("dp", sync_->own_bytes_sent());  // ZeRO-3's parameter gathers: dp's too
  if (moe_) {  // the MoE blocks' groups: their balance sums and router gradients are dp's
    out.add("dp", moe_->dense_bytes_sent());
    out.add("ep", moe_->ep_bytes_sent());
    out.add("edp", moe_->edp_bytes_sent());
    if (pipelined()) out.add("pp", moe_->pp_bytes_sent());  // every stage's blocks gathered
  }
  return out;
}

std::uint64_t Trainer::bytes_sent_so_far() const { return group_bytes_so_far().total(); }

namespace {

// A rank's metrics as one row of f64 fields (exact below 2^53 bytes), for one all-gather:
// the device side, then the host side's when the optimizer is offloaded (every rank's config
// says so alike).
constexpr std::int64_t kDeviceFields = kNumMemCategories + 2;
std::int64_t metric_fields(bool host) {
  return kDeviceFields + (host ? kNumMemCategories + 1 : 0);
}

void pack_metrics(const RankMetrics& m, bool host, double* r) {
  for (int c = 0; c < kNumMemCategories; ++c) r[c] = static_cast<double>(m.mem[std::size_t(c)]);
  r[kNumMemCategories] = static_cast<double>(m.mem_peak);
  r[kNumMemCategories + 1] = static_cast<double>(m.comm_bytes_sent);
  if (!host) return;
  for (int c = 0; c < kNumMemCategories; ++c) {
    r[kDeviceFields + c] = static_cast<double>(m.host_mem[std::size_t(c)]);
  }
  r[kDeviceFields + kNumMemCategories] = static_cast<double>(m.host_mem_peak);
}

RankMetrics unpack_metrics(const double* f, bool host) {
  RankMetrics m;
  for (int c = 0; c < kNumMemCategories; ++c) m.mem[std::size_t(c)] = static_cast<std::size_t>(f[c]);
  m.mem_peak = static_cast<std::size_t>(f[kNumMemCategories]);
  m.comm_bytes_sent = static_cast<std::uint64_t>(f[kNumMemCategories + 1]);
  if (!host) return m;
  for (int c = 0; c < kNumMemCategories; ++c) {
    m.host_mem[std::size_t(c)] = static_cast<std::size_t>(f[kDeviceFields + c]);
  }
  m.host_mem_peak = static_cast<std::size_t>(f[kDeviceFields + kNumMemCategories]);
  return m;
}

}  // namespace

std::vector<RankMetrics> Trainer::gather_rank_metrics() {
  RankMetrics mine;
  const MemoryLedger& ledger = current_ledger();
  for (MemCategory c : kAllMemCategories) mine.mem[static_cast<std::size_t>(c)] = ledger.live(c);
  mine.mem_peak = ledger.peak_total();
  for (MemCategory c : kAllMemCategories) {
    mine.host_mem[static_cast<std::size_t>(c)] = ledger.host_live(c);
  }
  mine.host_mem_peak = ledger.host_peak_total();
  mine.comm_bytes_sent = step_bytes_sent_;
  if (!grid_) return {mine};
  const bool host = config_.offload_optimizer;
  const std::int64_t fields = metric_fields(host);
  Tensor row = Tensor::empty({fields}, DType::kF64, MemCategory::kCommBuffers);
  pack_metrics(mine, host, row.data_as<double>());
  const int n = grid_->world().size();
  Tensor all = Tensor::empty({n * fields}, DType::kF64, MemCategory::kCommBuffers);
  grid_->world().all_gather(row, all);
  std::vector<RankMetrics> out;
  const auto* a = all.data_as<double>();
  for (int k = 0; k < n; ++k) out.push_back(unpack_metrics(a + k * fields, host));
  return out;
}

}  // namespace mixpar::ch08
