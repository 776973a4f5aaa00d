// mixpar-plan: which layout for this model on this cluster? Every dp x tp x cp x pp layout
// with its schedule, micro-batches, ZeRO stage, recompute and dtype that train_gpt would run
// (layout_search.h) and that fits memory (chapter 3's bill), ranked by predicted step time
// (step_time_model.h); the top ones printed with their breakdown and why the best beat the
// next, --json FILE for all. --calibrate writes this machine's cluster file (calibrate.h).
#include <chrono>
#include <cstdio>
#include <string>

#include "calibrate.h"
#include "layout_ranking.h"
#include "plan_flags.h"
#include "preflight.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::plan;

constexpr double kGB = 1e9;

int calibrate(const PlanFlags& f) {
  const Calibration cal = calibrate_this_machine(
      static_cast<int>(f.cluster.devices), f.cores, {32, 64, 128, 256, 512},
      {16e3, 256e3, 1e6, 4e6, 16e6});
  Cluster c = cal.cluster;
  const std::int64_t avail = ch08::mem_available_bytes();
  c.memory_bytes = avail > 0 ? static_cast<double>(avail) / static_cast<double>(c.devices) : 1e9;
  validate(c);
  std::printf("mixpar-plan --calibrate: %lld rank threads on %d cores\n",
              static_cast<long long>(c.devices), c.shared_cores);
  for (const auto& [n, rate] : cal.gemm) {
    std::printf("  GEMM %4d^3 f32 on %lld threads at once: %.2f GFLOP/s (curve: %.2f)\n", n,
                static_cast<long long>(c.devices), rate / 1e9, c.peak_flops * c.gemm_efficiency(n) / 1e9);
  }
  std::printf("  fit: rate %.2f GFLOP/s x n / (n + %.1f); the cores' FMA peak (gemm_peak.h) %.2f "
              "GFLOP/s\n", c.peak_flops / 1e9, c.gemm_half_size, cal.unit_peak / 1e9);
  for (const auto& [bytes, s] : cal.collective) {
    const double fit = 2.0 * (c.devices - 1) * cal.idle_latency +
                       2.0 * (c.devices - 1) / c.devices * bytes / c.intra.bandwidth;
    std::printf("  all-reduce %10.0f B over %lld ranks: %.1f us (fit %.1f us)\n", bytes,
                static_cast<long long>(c.devices), s * 1e6, fit * 1e6);
  }
  std::printf("  fit: alpha %.2f us per ring step, beta %.3f GB/s per rank\n",
              cal.idle_latency * 1e6, c.intra.bandwidth / 1e9);
  std::printf("  alpha between compute phases (what a step sees): %.2f us per ring step\n",
              c.intra.latency * 1e6);
  std::printf("  AdamW over %lld rank threads at once: %.1f M parameters/s (as a bandwidth, 32 B "
              "each: %.2f GB/s; memcpy on %d threads: %.2f GB/s)\n",
              static_cast<long long>(c.devices), cal.optimizer_params_per_s / 1e6,
              c.memory_bandwidth / 1e9, c.shared_cores, cal.copy_bandwidth / 1e9);
  std::printf("  memory per rank: MemAvailable / %lld = %.2f GB\n",
              static_cast<long long>(c.devices), c.memory_bytes / kGB);
  write_json_file(f.calibration_path, to_json(c));
  std::printf("wrote %s (--cluster this-machine)\n", f.calibration_path.c_str());
  return 0;
}

void print_row(int i, const RankedLayout& r, double memory_bytes) {
  const StepTime& t = r.time;
  std::printf("%3d  %-78s %9.4g %9.4g %9.4g %9.4g %9.4g %9.4g %9.4g %7.2f %7.2f\n", i,
              r.layout.text().c_str(), t.total(), t.compute, t.tp + t.cp, t.dp,
              t.pp + t.embedding, t.bubble, t.optimizer, static_cast<double>(r.memory.total()) / kGB,
              (memory_bytes - static_cast<double>(r.memory.total())) / kGB);
}

int plan(const PlanFlags& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const Ranking ranking = rank_layouts(f.space, f.model.shape, f.cluster);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Cluster& c = f.cluster;
  if (ranking.candidates == ranking.refused) {
    throw InputError("no layout of " + std::to_string(c.devices) + " devices runs this model: " +
                     (ranking.first_refusal.empty() ? "no candidate (global batch over dp)"
                                                     : ranking.first_refusal));
  }
  if (ranking.layouts.empty()) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "no layout fits %.3g GB per device: the smallest needs %.3f GB (%s)",
                  c.memory_bytes / kGB, static_cast<double>(ranking.smallest_bytes) / kGB,
                  ranking.smallest_layout.text().c_str());
    throw InputError(buf);
  }
  const GptConfig& m = f.model.shape;
  std::printf("mixpar-plan: %s (%lld parameters: n_layer %lld, n_embd %lld, n_head %lld, vocab "
              "%lld), seq %lld, global batch %lld\n",
              f.model.name.c_str(), static_cast<long long>(m.num_parameters()),
              static_cast<long long>(m.n_layer), static_cast<long long>(m.n_embd),
              static_cast<long long>(m.n_head), static_cast<long long>(m.vocab_size),
              static_cast<long long>(f.space.seq), static_cast<long long>(f.space.global_batch));
  if (!f.model.note.empty()) std::printf("  note: %s\n", f.model.note.c_str());
  std::printf("  cluster %s: %lld devices (%lld per node), %.3g GB, %.4g TFLOP/s, intra %.4g GB/s "
              "%.3g us, inter %.4g GB/s %.3g us%s\n",
              c.name.c_str(), static_cast<long long>(c.devices),
              static_cast<long long>(c.devices_per_node), c.memory_bytes / kGB, c.peak_flops / 1e12,
              c.intra.bandwidth / 1e9, c.intra.latency * 1e6, c.inter.bandwidth / 1e9,
              c.inter.latency * 1e6,
              c.shared_cores > 0 ? (", ranks share " + std::to_string(c.shared_cores) + " cores").c_str()
                                 : "");
  std::printf("  searched %lld layouts in %.2f s: %lld refused by train_gpt's rules, %lld do not "
              "fit, %zu ranked\n\n",
              static_cast<long long>(ranking.candidates), seconds,
              static_cast<long long>(ranking.refused), static_cast<long long>(ranking.too_big),
              ranking.layouts.size());
  std::printf("%3s  %-78s %9s %9s %9s %9s %9s %9s %9s %7s %7s\n", "#", "layout", "step s",
              "compute", "tp+cp", "dp", "pp", "bubble", "optim", "mem GB", "free GB");
  const int n = std::min<int>(f.top, static_cast<int>(ranking.layouts.size()));
  for (int i = 0; i < n; ++i) print_row(i + 1, ranking.layouts[static_cast<std::size_t>(i)], c.memory_bytes);
  std::printf("(seconds per optimizer step; tp+cp, dp, pp: exposed communication, pp with the "
              "tied embedding's all-reduce;\n optim: the optimizer step's memory traffic)\n");
  const RankedLayout& best = ranking.layouts.front();
  const double tokens = static_cast<double>(f.space.global_batch * f.space.seq);
  // A shared machine's peak_flops is already the whole machine's (calibrate.h).
  const double peak = c.peak_flops * (c.shared_cores > 0 ? 1.0 : static_cast<double>(c.devices)) *
                      (best.layout.precision == mem::Precision::kFp32 ? c.fp32_peak_ratio : 1.0);
  std::printf("\nbest: %.0f tokens/s, MFU %.1f%% (model FLOPs %.4g per step)\n",
              tokens / best.time.total(), 100.0 * best.time.flops_per_step / best.time.total() / peak,
              best.time.flops_per_step);
  if (ranking.layouts.size() > 1) {
    std::printf("why: %s\n", why_faster(best, ranking.layouts[1]).c_str());
  }
  if (!f.json_path.empty()) {
    Json j = Json::object();
    j.set("model", f.model.name);
    j.set("parameters", m.num_parameters());
    j.set("seq", f.space.seq);
    j.set("global_batch", f.space.global_batch);
    j.set("cluster", to_json(c));
    j.set("candidates", ranking.candidates);
    j.set("refused", ranking.refused);
    j.set("too_big", ranking.too_big);
    Json list = Json::array();
    for (const RankedLayout& r : ranking.layouts) list.push_back(to_json(r));
    j.set("layouts", std::move(list));
    write_json_file(f.json_path, j);
  }
  return 0;
}

int run(int argc, char** argv) {
  const PlanFlags f = parse_plan_flags(argc, argv);
  return f.calibrate ? calibrate(f) : plan(f);
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
