#include "ch07_pipeline/pipeline_lesson.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <mutex>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "ch07_pipeline/bubble.h"
#include "ch07_pipeline/model_chunks.h"
#include "parallel/count_once.h"
#include "parallel/replicas.h"
#include "random/philox.h"
#include "report/format.h"
#include "report/text_table.h"
#include "tensor/ledger.h"
#include "util/errors.h"

namespace mixpar::ch07 {
namespace {

void one_thread() {
#if defined(_OPENMP)
  omp_set_num_threads(1);  // GEMM blocking, hence rounding, depends on the thread count
#endif
}

GptOptions options_for(const GptStage& st) {
  GptOptions o;
  o.seed = 3;
  o.stage = st;
  return o;
}

std::vector<float> values(const Tensor& t) {
  const float* p = t.data_as<float>();
  return {p, p + t.numel()};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Largest |a - b| over the largest |b|: how far apart two gradients are, relative to size.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

}  // namespace

GptConfig small_gpt() { return {8, 2, 16, 8, 32}; }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<TokenBatch> lesson_batches(const GptConfig& c, int m, std::int64_t B, std::int64_t T,
                                       std::uint64_t seed) {
  Philox g(seed);
  std::vector<TokenBatch> out;
  for (int k = 0; k < m; ++k) {
    TokenBatch b;
    b.B = B;
    b.T = T;
    for (std::int64_t i = 0; i < B * T; ++i) {
      b.inputs.push_back(static_cast<std::int32_t>(g.next_u32() % c.vocab_size));
      b.targets.push_back(static_cast<std::int32_t>(g.next_u32() % c.vocab_size));
    }
    out.push_back(std::move(b));
  }
  return out;
}

OneDevice one_device(const GptConfig& c, const std::vector<TokenBatch>& batches) {
  one_thread();
  GptModel whole(c, options_for({}));
  OneDevice r;
  const float seed = 1.0f / static_cast<float>(batches.size());
  for (std::size_t k = 0; k < batches.size(); ++k) {
    const TokenBatch& b = batches[k];
    r.loss_sum += whole.forward(b.inputs, b.targets, b.B, b.T);
    whole.backward(seed, k > 0);
  }
  double sq = 0;
  for (const ParamEntry& e : whole.registry().entries()) {
    r.grads[e.name] = values(e.grad);
    for (float v : r.grads[e.name]) sq += double(v) * double(v);
  }
  r.grad_norm = std::sqrt(sq);
  return r;
}

GptPipelineRun run_gpt_pipeline(const GptConfig& c, const PipelinePlan& plan,
                                const std::vector<TokenBatch>& batches,
                                const GptPipelineOptions& opts) {
  const PipelineLayout& l = plan.layout;
  if (opts.preflight) {
    preflight(plan, opts.local.synchronous_sends ? SendMode::kRendezvous : SendMode::kEager);
  }
  GptPipelineRun out;
  out.peak_activation_bytes.resize(std::size_t(l.pp));
  out.pp_bytes_sent.resize(std::size_t(l.pp));
  out.compute_s.resize(std::size_t(l.pp));
  std::mutex mu;
  run_local(l.pp, [&](Communicator& world) {
    one_thread();
    const int r = world.rank();
    const bool v_shape = l.placement == Placement::kV;
    // The V: the rank's chunks share one registry (make_chunks_registry), so rank 0's
    // embedding and head use one wte, as one device does; no copy to sum.
    std::unique_ptr<ParamRegistry> shared;
    if (v_shape) {
      shared = std::make_unique<ParamRegistry>(
          make_chunks_registry(c, rank_chunk_stages(c, r, l.pp, l.virtual_stages, l.placement)));
      shared->allocate(DType::kF32);
      shared->initialize(3);
    }
    std::vector<GptModel> chunks;
    chunks.reserve(std::size_t(l.virtual_stages));
    for (int ch = 0; ch < l.virtual_stages; ++ch) {
      GptOptions o = options_for(gpt_stage(c, l.stage_of(r, ch), l.stages()));
      if (shared) {
        o.params = shared.get();
        o.wte_grad_shared = r == 0;
      }
      chunks.emplace_back(c, o);
    }
    std::vector<GptModel*> ptrs;
    for (GptModel& g : chunks) ptrs.push_back(&g);
    // The tied wte lives on chunk 0 of the first rank and the last chunk of the last rank
    // (the V: both on rank 0, one tensor).
    std::unique_ptr<Communicator> embedding =
        world.split(!v_shape && (r == 0 || r == l.pp - 1) ? 0 : -1, r);
    GptModel& wte_holder = r == 0 ? chunks.front() : chunks.back();
    // Each parameter once: the V's chunks are views of the shared registry.
    std::vector<ParamRegistry*> owners;
    if (shared) {
      owners.push_back(shared.get());
    } else {
      for (GptModel& g : chunks) owners.push_back(&g.registry());
    }
    MemoryLedger& ledger = current_ledger();
    const std::size_t before = ledger.live(MemCategory::kActivations);
    const float seed = opts.divide_loss_by_m ? 1.0f / float(l.micro_batches) : 1.0f;
    double loss_sum = 0, compute_s = 0, step_s = 0;
    std::size_t sent = 0;
    for (int step = 0; step < opts.sgd_steps; ++step) {
      ledger.reset_peaks();
      world.traffic().reset();
      GptStageWork work(ptrs, plan, r, batches, seed);
      std::vector<TraceSpan> spans;
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      compute_s = execute(plan.ranks[std::size_t(r)], l, world, work, spans, r);
      step_s = seconds_since(t0);
      sent = world.traffic().total().bytes_sent;
      if (opts.sum_tied_embedding && !v_shape) {
        sum_tied_embedding_grads(wte_holder, embedding.get());
      }
      loss_sum = work.loss_sum();
      if (opts.lr > 0) {
        for (ParamRegistry* g : owners) {
          for (const ParamEntry& e : g->entries()) {
            Tensor param = e.param;  // a handle on the registry's storage
            float* p = param.data_as<float>();
            const float* d = e.grad.data_as<float>();
            for (std::int64_t i = 0; i < e.param.numel(); ++i) p[i] -= opts.lr * d[i];
          }
        }
      }
    }
    // The norm over every stage: each rank's counted squares (the last stage's wte copy is
    // not counted), summed over the pipeline.
    double mine = 0;
    for (GptModel& g : chunks) {
      std::vector<Tensor> grads;
      for (const ParamEntry& e : g.registry().entries()) grads.push_back(e.grad);
      mine += counted_sum_of_squares(grads, norm_counted(g.registry().entries(), {r, 0, 0, r}));
    }
    Tensor total = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
    total.data_as<double>()[0] = mine;
    world.all_reduce(total);
    std::lock_guard<std::mutex> lock(mu);
    out.peak_activation_bytes[std::size_t(r)] = ledger.peak(MemCategory::kActivations) - before;
    out.pp_bytes_sent[std::size_t(r)] = sent;
    out.compute_s[std::size_t(r)] = compute_s;
    out.step_s = std::max(out.step_s, step_s);
    out.grad_norm = std::sqrt(total.data_as<double>()[0]);
    if (r == 0) out.first_stage_norm = std::sqrt(mine);
    if (r == l.rank_of(l.stages() - 1)) out.loss_sum = loss_sum;
    for (GptModel& g : chunks) {
      for (const ParamEntry& e : g.registry().entries()) {
        if (!e.holding.tied_copy) out.grads[e.name] = values(e.grad);
      }
    }
    if (r == 0) out.wte_hash_first = weights_hash(wte_holder.param("wte.weight"));
    if (r == (v_shape ? 0 : l.pp - 1)) {
      out.wte_hash_last = weights_hash(wte_holder.param("wte.weight"));
    }
  }, opts.local);
  return out;
}

Section schedule_section(ScheduleKind kind, const PipelineLayout& l) {
  const PipelinePlan plan = make_plan(kind, l);
  preflight(plan);
  const PlayResult unit = play(plan, SendMode::kEager);
  Section s;
  s.title = std::string(schedule_name(kind)) + ": p " + num(l.pp) + ", m " +
            num(l.micro_batches) + (l.virtual_stages > 1 ? ", v " + num(l.virtual_stages) : "") +
            " (F, B, W, . idle; T_F = 1, T_B = 2, B = W = 1 split)";
  const double measured = bubble_fraction(unit.timeline), formula = bubble_formula(kind, l);
  const std::vector<int> peaks = peak_activations(unit.timeline);
  std::string peak_text, want_text;
  bool peaks_ok = true;
  for (int r = 0; r < l.pp; ++r) {
    const int want = expected_peak_activations(kind, l, r);
    peak_text += (r ? " " : "") + num(peaks[std::size_t(r)]);
    want_text += (r ? " " : "") + num(want);
    peaks_ok = peaks_ok && peaks[std::size_t(r)] == want;
  }
  s.text = gantt(unit.timeline, l) +
           fmt("  bubble_fraction %.4f, formula %s = %.4f; peak activations by rank: %s\n",
               measured, bubble_formula_text(kind).c_str(), formula, peak_text.c_str());
  const bool formula_applies = kind != ScheduleKind::kZbH1 || l.micro_batches >= l.pp;
  if (formula_applies) {
    s.claims.push_back({fmt("%s p%d m%d: bubble = %s", std::string(schedule_name(kind)).c_str(),
                            l.pp, l.micro_batches, bubble_formula_text(kind).c_str()),
                        fmt("%.4f", formula), fmt("%.4f", measured),
                        std::abs(measured - formula) < 1e-12});
  }
  s.claims.push_back({fmt("%s p%d m%d: peak activations by rank as the paper states",
                          std::string(schedule_name(kind)).c_str(), l.pp, l.micro_batches),
                      want_text, peak_text, peaks_ok});
  return s;
}

Section schedules_side_by_side(int p, int m) {
  Section s;
  s.title = fmt("The four schedules side by side: p %d, m %d (v 2 for interleaved)", p, m);
  TextTable t({"schedule", "warm-up F (rank 0..p-1)", "bubble", "formula", "peak act. by rank",
               "runs with rendezvous sends"});
  for (ScheduleKind k : {ScheduleKind::kAfab, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved,
                         ScheduleKind::kZbH1}) {
    const PipelineLayout l{p, m, k == ScheduleKind::kInterleaved ? 2 : 1};
    if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
    const PipelinePlan plan = make_plan(k, l);
    const PlayResult unit = play(plan, SendMode::kEager);
    std::string warm, peaks;
    for (int r = 0; r < p; ++r) {
      warm += (r ? " " : "") + num(warmup_forwards(k, l, r));
      peaks += (r ? " " : "") + num(peak_activations(unit.timeline)[std::size_t(r)]);
    }
    t.add({std::string(schedule_name(k)), warm, fmt("%.4f", bubble_fraction(unit.timeline)),
           fmt("%.4f", bubble_formula(k, l)), peaks,
           survives_rendezvous_sends(plan) ? "yes" : "no (needs buffered sends)"});
  }
  s.text = t.str();
  const PipelineLayout l{p, m, 1};
  const double zb = bubble_fraction(play(make_plan(ScheduleKind::kZbH1, l), SendMode::kEager).timeline);
  const double ofob =
      bubble_fraction(play(make_plan(ScheduleKind::kOneFOneB, l), SendMode::kEager).timeline);
  if (m >= p) {  // the claim is for a pipeline that fills
    s.claims.push_back({"ZB-H1's bubble is below half of 1F1B's", fmt("< %.4f", ofob / 2),
                        fmt("%.4f", zb), zb < ofob / 2});
  }
  return s;
}

Section bubble_sweep(int p) {
  Section s;
  s.title = fmt("Bubble against m at p %d: the unit-cost timeline beside the formulas", p);
  TextTable t({"m", "afab", "1f1b", "(p-1)/(m+p-1)", "interleaved v2", "(p-1)/(2m+p-1)", "zb-h1",
               "(p-1)/(3m+p-1)"});
  bool ok = true;
  for (int m : {1, 2, 4, 8, 16, 32}) {
    auto measured = [&](ScheduleKind k, int v) {
      const PipelineLayout l{p, m, v};
      const double b = bubble_fraction(play(make_plan(k, l), SendMode::kEager).timeline);
      const bool applies = k != ScheduleKind::kZbH1 || m >= p;
      ok = ok && (!applies || std::abs(b - bubble_formula(k, l)) < 1e-12);
      return fmt("%.4f", b);
    };
    const std::string inter = m % p == 0 ? measured(ScheduleKind::kInterleaved, 2) : "-";
    t.add({num(m), measured(ScheduleKind::kAfab, 1), measured(ScheduleKind::kOneFOneB, 1),
           fmt("%.4f", bubble_formula(ScheduleKind::kOneFOneB, {p, m, 1})), inter,
           fmt("%.4f", bubble_formula(ScheduleKind::kInterleaved, {p, m, 2})),
           measured(ScheduleKind::kZbH1, 1),
           fmt("%.4f", bubble_formula(ScheduleKind::kZbH1, {p, m, 1}))});
  }
  s.text = t.str() + "  (zb-h1's formula holds once the pipeline fills, m >= p)\n";
  s.claims.push_back(yes_claim(fmt("p %d: every timeline's bubble equals its formula", p), ok));
  return s;
}

Section gpt_runs_equal_one_device() {
  Section s;
  const GptConfig c = small_gpt();
  s.title = "GPT-2 stages (8 blocks, 16 wide) on the runtime, local threads, against one device";
  TextTable t({"schedule", "p", "m", "v", "loss", "bitwise params", "wte gap / max|g|",
               "norm over all stages / one device", "rank 0's norm alone"});
  bool loss_ok = true, bits_ok = true, norm_ok = true, partial_low = true;
  double worst_wte = 0;
  for (ScheduleKind k : all_schedules()) {
    for (int p : {2, 4}) {
      // DualPipeV needs m >= 2p; every other schedule runs m = 4.
      const int m = k == ScheduleKind::kDualPipeV ? 2 * p : 4;
      const int v = k == ScheduleKind::kAfab || k == ScheduleKind::kOneFOneB ||
                            k == ScheduleKind::kZbH1
                        ? 1
                        : 2;
      const auto bs = lesson_batches(c, m);
      const OneDevice ref = one_device(c, bs);
      const GptPipelineRun run = run_gpt_pipeline(c, make_plan(k, {p, m, v}), bs);
      int bitwise = 0, total = 0;
      for (const auto& [name, g] : ref.grads) {
        if (name == "wte.weight") continue;
        ++total;
        bitwise += bitwise_equal(run.grads.at(name), g) ? 1 : 0;
      }
      const double gap = relative_gap(run.grads.at("wte.weight"), ref.grads.at("wte.weight"));
      loss_ok = loss_ok && run.loss_sum == ref.loss_sum;
      bits_ok = bits_ok && bitwise == total;
      worst_wte = std::max(worst_wte, gap);
      norm_ok = norm_ok && std::abs(run.grad_norm / ref.grad_norm - 1) <= 1e-6;
      partial_low = partial_low && run.first_stage_norm < 0.999 * ref.grad_norm;
      t.add({std::string(schedule_name(k)), num(p), num(m), num(v),
             run.loss_sum == ref.loss_sum ? "bitwise" : "differs", fmt("%d / %d", bitwise, total),
             fmt("%.1e", gap), fmt("%.9f", run.grad_norm / ref.grad_norm),
             fmt("%.3f x", run.first_stage_norm / ref.grad_norm)});
    }
  }
  s.text = t.str() +
           "  Every stage accumulates its micro-batches in one device's order (ZB-H1's delayed\n"
           "  W's too: first in, first out): every gradient but wte bit for bit. wte's two halves\n"
           "  (embedding on the first stage, head on the last) are summed once per step, not in\n"
           "  place per micro-batch: rounding apart. In the V (zb-v, dualpipev) both halves are\n"
           "  on rank 0 and add to one tensor, the head's first: rounding apart too.\n";
  s.claims.push_back(yes_claim("the pipeline's loss equals one device's, bit for bit", loss_ok));
  s.claims.push_back(yes_claim("every gradient but the tied wte equals one device's bit for bit", bits_ok));
  s.claims.push_back(tolerance_claim("tied wte gradient (first + last stage) vs one device, "
                                     "largest gap / largest |g|", worst_wte, 1e-6));
  s.claims.push_back(yes_claim("the norm over every stage is one device's (to 1e-6)", norm_ok));
  s.claims.push_back(yes_claim("a norm of the first stage alone is too small", partial_low));
  return s;
}

Section measured_bubble(int p, int m) {
  Section s;
  // Wider blocks, so compute outweighs the hand-offs between threads.
  const GptConfig c{4, 4, 128, 64, 256};
  // Rounds over the schedules, one after the other, so that a change of the machine's
  // load falls on every schedule alike; the spread of a schedule's rounds says how far one
  // reading can be trusted.
  constexpr int kRounds = 3;
  s.title = fmt("The bubble of real runs: p %d, m %d, GPT-2 4 x 128 wide, B x T = 4 x 64, "
                "threads of this process, %d rounds", p, m, kRounds);
  TextTable t({"schedule", "step (ms)", "compute by rank (ms)", "measured bubble (min-max)",
               "unit-cost bubble", "formula"});
  const auto bs = lesson_batches(c, m, 4, 64);
  std::vector<ScheduleKind> kinds;
  const auto chunks = [](ScheduleKind k) {
    return k == ScheduleKind::kInterleaved || placement_of(k) == Placement::kV ? 2 : 1;
  };
  for (ScheduleKind k : all_schedules()) {
    // Interleaved: 2 chunks of one block each per rank (4 blocks), where m is a multiple of p;
    // the V the same 2 chunks (DualPipeV where m >= 2p).
    if (chunks(k) == 2 && 2 * p > c.n_layer) continue;
    if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
    if (k == ScheduleKind::kDualPipeV && m < 2 * p) continue;
    kinds.push_back(k);
  }
  std::vector<std::vector<double>> bubbles(kinds.size());
  std::vector<GptPipelineRun> last(kinds.size());
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      GptPipelineOptions o;
      o.sgd_steps = 2;  // the first step allocates
      last[i] = run_gpt_pipeline(c, make_plan(kinds[i], {p, m, chunks(kinds[i])}), bs, o);
      double busy = 0;
      for (int r = 0; r < p; ++r) busy += last[i].compute_s[std::size_t(r)];
      bubbles[i].push_back(1 - busy / (double(p) * last[i].step_s));
    }
  }
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const bool interleaved = kinds[i] == ScheduleKind::kInterleaved;
    const PipelinePlan plan = make_plan(kinds[i], {p, m, chunks(kinds[i])});
    std::vector<double> b = bubbles[i];
    std::sort(b.begin(), b.end());
    std::string by_rank;
    for (int r = 0; r < p; ++r) {
      by_rank += (r ? " " : "") + fmt("%.1f", last[i].compute_s[std::size_t(r)] * 1e3);
    }
    t.add({std::string(schedule_name(kinds[i])) + (interleaved ? " v2" : ""),
           fmt("%.1f", last[i].step_s * 1e3), by_rank,
           fmt("%.3f (%.3f-%.3f)", b[b.size() / 2], b.front(), b.back()),
           fmt("%.3f", bubble_fraction(play(plan, SendMode::kEager).timeline)),
           fmt("%.3f", bubble_formula(kinds[i], plan.layout))});
  }
  s.text = t.str() +
           "  measured = 1 - (compute over the ranks) / (p x step), the median of the rounds\n"
           "  and their range; step and compute are the last round's. The last stage's head and\n"
           "  loss make its forward and backward longer than the others', a hand-off between\n"
           "  threads is not free, and other processes take cores: wall-clock figures, shown,\n"
           "  not checked. What is certain is the unit-cost column (the simulator's, whose\n"
           "  bubbles are checked above); on a busy machine the measured order can differ.\n";
  return s;
}

int sends_in_plan(const PipelinePlan& plan, int rank) {
  int n = 0;
  for (const Action& a : plan.ranks[std::size_t(rank)]) {
    for (const Transfer& t : a.transfers) n += t.send ? 1 : 0;
  }
  return n;
}

int sends_of_placement(const PipelineLayout& l, int rank) {
  int n = 0;
  for (int c = 0; c < l.virtual_stages; ++c) {
    const int s = l.stage_of(rank, c);
    if (s + 1 < l.stages() && l.rank_of(s + 1) != rank) n += l.micro_batches;  // activations
    if (s > 0 && l.rank_of(s - 1) != rank) n += l.micro_batches;               // gradients
  }
  return n;
}

Section six_schedules(int p, int m) {
  Section s;
  const GptConfig c = small_gpt();
  s.title = fmt("The six schedules side by side: p %d, m %d, v 2 where a schedule has chunks "
                "(GPT-2 8 x 16 for the parameters)", p, m);
  TextTable t({"schedule", "v", "bubble", "formula", "idle", "formula", "peak act.", "formula",
               "params/rank", "sends/step", "placement", "rendezvous"});
  const double whole = double(make_gpt2_registry(c).numel());
  bool bubbles_ok = true, peaks_ok = true, sends_ok = true;
  for (ScheduleKind k : all_schedules()) {
    const int v = k == ScheduleKind::kAfab || k == ScheduleKind::kOneFOneB ||
                          k == ScheduleKind::kZbH1
                      ? 1
                      : 2;
    if (k == ScheduleKind::kInterleaved && m % p != 0) continue;
    if (k == ScheduleKind::kDualPipeV && m < 2 * p) continue;
    const PipelinePlan plan = make_plan(k, {p, m, v});
    const PipelineLayout& l = plan.layout;
    const Timeline tl = play(plan, SendMode::kEager).timeline;
    const double frac = bubble_fraction(tl), frac_f = bubble_formula(k, l);
    const std::int64_t idle = bubble_time(tl), idle_f = bubble_time_formula(k, l, UnitCosts{});
    bubbles_ok = bubbles_ok && std::abs(frac - frac_f) < 1e-12 && idle == idle_f;
    // Peak activations in stage micro-batches (one micro-batch through 1/p of the model): a
    // chunk's are 1/v of a stage's. The largest over the ranks.
    int peak = 0, peak_f = 0, sends = 0, sends_f = 0;
    double params = 0;
    const std::vector<int> peaks = peak_activations(tl);
    for (int r = 0; r < p; ++r) {
      peak = std::max(peak, peaks[std::size_t(r)]);
      peak_f = std::max(peak_f, expected_peak_activations(k, l, r));
      sends = std::max(sends, sends_in_plan(plan, r));
      sends_f = std::max(sends_f, sends_of_placement(l, r));
      params = std::max(params, double(make_chunks_registry(
                                           c, rank_chunk_stages(c, r, p, v, l.placement))
                                           .numel()));
    }
    peaks_ok = peaks_ok && peak == peak_f;
    sends_ok = sends_ok && sends == sends_f;
    t.add({std::string(schedule_name(k)), num(v), fmt("%.4f", frac), fmt("%.4f", frac_f),
           num(idle), bubble_time_formula_text(k) + " = " + num(idle_f),
           fmt("%.1f", double(peak) / v), fmt("%.1f", double(peak_f) / v),
           fmt("%.2f x", params / (whole / p)), num(sends), num(sends_f),
           survives_rendezvous_sends(plan) ? "yes" : "no"});
  }
  s.text = t.str() +
           "  bubble: the idle share of p x the step, simulated at unit cost (T_F = 1, T_B = 2,\n"
           "  B = W = 1 split, F&B = 3: one chunk's, one stage's when v = 1), and its formula;\n"
           "  idle: the most idle rank's time units, and DualPipe's formula for it (F, B whole\n"
           "  backward, W, F&B of one chunk). peak act.: the most stage micro-batches' activations\n"
           "  a rank holds (a chunk's count 1/v), simulated and as tabulated. params/rank: the\n"
           "  largest rank's parameters over the model's / p, from the registries (1F1B's last\n"
           "  rank holds the tied wte again; the V's rank 0 holds the embedding and the head, one\n"
           "  wte; DualPipe's two-way form, not built here, would hold 2x). sends/step: the\n"
           "  busiest rank's messages in the plan, and m per neighbour stage on another rank.\n";
  s.claims.push_back(yes_claim(fmt("p %d m %d: every schedule's simulated bubble (share and "
                                   "idle time) is its formula's", p, m), bubbles_ok));
  s.claims.push_back(yes_claim("every schedule's peak activations are the tabulated ones",
                               peaks_ok));
  s.claims.push_back(yes_claim("every plan sends m messages per neighbour stage on another rank",
                               sends_ok));
  return s;
}

Section dualpipev_overlap(int m_per_rank) {
  Section s;
  s.title = fmt("DualPipeV's overlapped pair: a CPU runs F then B (F&B = 3), a GPU hides one "
                "micro-batch's communication under the other's compute (F&B = max(F, B) = 2); "
                "m = %d p", m_per_rank);
  TextTable t({"p", "m", "step, CPU", "step, GPU", "idle, CPU", "idle, GPU",
               "(p-1)(F&B+B-3W), CPU", "GPU"});
  bool ok = true, shorter = true;
  for (int p : {2, 4, 8}) {
    const int m = m_per_rank * p;
    const PipelinePlan plan = make_plan(ScheduleKind::kDualPipeV, {p, m, 2});
    UnitCosts cpu, gpu;
    gpu.overlapped = 2;
    const Timeline a = play(plan, SendMode::kEager, cpu).timeline;
    const Timeline b = play(plan, SendMode::kEager, gpu).timeline;
    const std::int64_t fa = bubble_time_formula(ScheduleKind::kDualPipeV, plan.layout, cpu);
    const std::int64_t fb = bubble_time_formula(ScheduleKind::kDualPipeV, plan.layout, gpu);
    ok = ok && bubble_time(a) == fa && bubble_time(b) == fb;
    shorter = shorter && b.makespan < a.makespan;
    t.add({num(p), num(m), num(a.makespan), num(b.makespan), num(bubble_time(a)),
           num(bubble_time(b)), num(fa), num(fb)});
  }
  s.text = t.str() +
           "  The pair is one action of the list (the runtime runs its forward, then its\n"
           "  backward, on a CPU's one stream). On a GPU the two run on streams of their own: the\n"
           "  forward's sends and an MoE's all-to-all hide under the backward's kernels and back,\n"
           "  which DualPipe was built for; the simulator models it as a pair costing its longer\n"
           "  half. The step shrinks by the 2m(F + B - F&B) units the pairs save, less what the\n"
           "  unpaired actions at the ends keep.\n";
  s.claims.push_back(yes_claim("DualPipeV's idle time is (p-1)(F&B+B-3W) at both pair costs", ok));
  s.claims.push_back(yes_claim("the overlapped pair shortens the step", shorter));
  return s;
}

}  // namespace mixpar::ch07
