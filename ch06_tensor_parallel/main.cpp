// ch06_tensor_parallel: Megatron's split of a GPT-2 (column- and row-parallel layers with f
// and g, attention by heads, the vocabulary-parallel embedding and loss) trained on 1, 2 and 4
// ranks; the traffic per block against its formula; activation memory per layer against
// Korthikanti et al.'s; then context parallelism (part 2: causal attention split by sequence,
// ring and all-to-all, against one device, its traffic, work balance and memory); and the
// failure modes of both (--bug shows one of them alone). Every claim is
// checked: a failed claim exits with 1, a bad flag with 2.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ch06_tensor_parallel/cp_report.h"
#include "ch06_tensor_parallel/tp_demo_flags.h"
#include "ch06_tensor_parallel/tp_lesson.h"
#include "model/gpt_params.h"
#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch06;

// Order-of-summation noise over 10 f32 steps (tests/ch06/tensor_parallel_gpt_test.cpp).
constexpr double kTol = 1e-4;

void print_equivalence(int steps, ClaimTable& checks) {
  TpRunConfig c;
  c.steps = steps;
  const TpRunResult one = train_tensor_parallel(c);
  TextTable t({"run", "loss step 1", "loss last", "max |d loss|", "max |d grad norm|",
               "max |d weight|"});
  t.add({"tp 1 (one device)", fmt("%.6f", one.loss.front()), fmt("%.6f", one.loss.back()), "-",
         "-", "-"});
  for (int vocab : {64, 61, 0}) {  // 0: V 64 with sequence parallelism
    TpRunConfig v = c;
    v.model.vocab_size = vocab == 0 ? 64 : vocab;
    v.sequence_parallel = vocab == 0;
    const TpRunResult base = vocab != 61 ? one : train_tensor_parallel(v);
    for (int tp : {2, 4}) {
      v.tp = tp;
      const TpRunResult r = train_tensor_parallel(v);
      const std::string name =
          vocab == 0 ? fmt("tp %d + SP, V 64", tp)
                     : fmt("tp %d, V %d (padded to %lld)", tp, vocab,
                           static_cast<long long>(padded_vocab(vocab, tp)));
      const double dl = max_abs_difference(base.loss, r.loss);
      const double dn = max_abs_difference(base.grad_norm, r.grad_norm);
      const double dw = max_weight_difference(base, r);
      t.add({name, fmt("%.6f", r.loss.front()), fmt("%.6f", r.loss.back()), fmt("%.2e", dl),
             fmt("%.2e", dn), fmt("%.2e", dw)});
      checks.add({tolerance_claim(name + " equals tp 1: weights after " +
                                      std::to_string(steps) + " steps",
                                  dw, kTol),
                  tolerance_claim(name + " equals tp 1: losses", dl, kTol)});
      if (tp == 2 && vocab != 61) {
        checks.add({yes_claim(std::string(vocab == 0 ? "SP: " : "") +
                                  "tp replicas of LayerNorms, biases, wpe stay bit-identical",
                              r.replica_drift == 0.0)});
      }
    }
  }
  std::printf(
      "\n== 1. Split layers equal the unsplit model: %d AdamW steps, 2 blocks, 4 heads, C 32\n"
      "   Every shard is cut from the full model's initialisation of the same seed; the only\n"
      "   change is the order of the sums (each all-reduce adds tp partial dot products).\n%s"
      "   tolerance %.0e: a thousand f32 ulps of values of order 1 (derivation in the README)\n",
      steps, t.str().c_str(), kTol);
  checks.add({yes_claim("the loss falls on one device", one.loss.back() < one.loss.front())});
}

void print_traffic(ClaimTable& checks) {
  TpRunConfig c;
  c.steps = 1;
  const std::int64_t B = c.B, T = c.T, C = c.model.n_embd, L = c.model.n_layer;
  const std::int64_t btc = B * T * C;
  TextTable t({"tp", "region", "calls", "elements", "bytes sent (rank 0)", "formula"});
  for (int tp : {2, 4}) {
    c.tp = tp;
    c.sequence_parallel = false;
    const TpRunResult r = train_tensor_parallel(c);
    const double ring = 2.0 * (tp - 1) / tp;  // all-reduce bytes per rank / buffer
    struct Row {
      const char* region;
      std::int64_t calls, elements;
      const char* formula;
    };
    const Row rows[] = {
        {"block forward", 2 * L, 2 * L * btc, "2 all-reduces of B T C per block (g)"},
        {"block backward", 2 * L, 2 * L * btc, "2 all-reduces of B T C per block (f)"},
        {"embedding", 1, btc, "1 all-reduce of B T C"},
        {"head backward", 1, btc, "1 all-reduce of B T C (the head's f)"},
        {"loss", 3, 3 * B * T, "max, target, sum: 3 x B T, never B T V"},
    };
    for (const Row& w : rows) {
      const TpRegionTraffic& m = r.traffic.at(w.region);
      t.add({std::to_string(tp), w.region, std::to_string(m.calls), std::to_string(m.elements),
             format_bytes(m.bytes_sent), w.formula});
      const auto want = static_cast<std::size_t>(ring * double(w.elements) * 4.0 + 0.5);
      const bool bytes_ok = std::string(w.region) == "loss" || m.bytes_sent == want;
      checks.add({{fmt("tp %d %s: %s", tp, w.region, w.formula),
                   fmt("%lld calls, %lld elements", static_cast<long long>(w.calls),
                       static_cast<long long>(w.elements)),
                   fmt("%lld calls, %lld elements", static_cast<long long>(m.calls),
                       static_cast<long long>(m.elements)),
                   m.calls == w.calls && m.elements == w.elements && bytes_ok}});
    }
  }
  // Sequence parallel: an all-gather and a reduce-scatter in place of each all-reduce.
  c.tp = 2;
  const TpRunResult plain = train_tensor_parallel(c);
  c.sequence_parallel = true;
  const TpRunResult sp = train_tensor_parallel(c);
  for (const char* region : {"block forward", "block backward", "block backward re-gather",
                             "embedding", "embedding backward", "head forward",
                             "head backward", "head backward re-gather",
                             "replicated gradients", "loss"}) {
    const TpRegionTraffic& m = sp.traffic.at(region);
    t.add({"2 + SP", region, std::to_string(m.calls), std::to_string(m.elements),
           format_bytes(m.bytes_sent), ""});
  }
  {  // every block's replicated gradients and ln_f's wait for one sum after the last block
    const TpRegionTraffic& r = sp.traffic.at("replicated gradients");
    const std::int64_t want = 6 * C * L + 2 * C;
    checks.add({{"SP replicated gradients: one all-reduce of 6 C a block + 2 C (ln_f)",
                 fmt("1 call, %lld elements", static_cast<long long>(want)),
                 fmt("%lld call%s, %lld elements", static_cast<long long>(r.calls),
                     r.calls == 1 ? "" : "s", static_cast<long long>(r.elements)),
                 r.calls == 1 && r.elements == want}});
  }
  for (const char* region : {"block forward", "block backward"}) {
    const std::size_t a = plain.traffic.at(region).bytes_sent, b = sp.traffic.at(region).bytes_sent;
    checks.add({{fmt("SP %s: all-gathers + reduce-scatters send what the all-reduces did",
                     region),
                 format_bytes(a), format_bytes(b), a == b}});
  }
  std::printf(
      "\n== 2. Traffic per micro-batch, from the tp communicator (B %lld, T %lld, C %lld, "
      "%lld blocks, f32)\n%s"
      "   Bytes are the ring's 2 (tp - 1) / tp of each buffer per rank for an all-reduce,\n"
      "   (tp - 1) / tp for an all-gather or a reduce-scatter (elements: the gathered size).\n",
      static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(C),
      static_cast<long long>(L), t.str().c_str());
}

void print_memory(ClaimTable& checks) {
  // 16-bit activations (bf16), as Korthikanti et al. count them; per layer = the ledger's
  // activation peak of a 2-block model minus that of a 1-block one.
  TextTable t({"tp", "per layer (ledger)", "formula", "terms"});
  for (int run = 0; run < 5; ++run) {
    const int tp = run < 3 ? 1 << run : 1 << (run - 2);  // 1, 2, 4, then 2, 4 with SP
    const bool seq = run >= 3;
    TpRunConfig c;
    c.steps = 1;
    c.tp = tp;
    c.sequence_parallel = seq;
    c.dtype = DType::kBF16;
    c.model.n_layer = 2;
    const std::size_t two = train_tensor_parallel(c).activation_peak;
    c.model.n_layer = 1;
    const std::size_t one = train_tensor_parallel(c).activation_peak;
    const double s = double(c.T), b = double(c.B), h = double(c.model.n_embd);
    const double a = double(c.model.n_head), tt = tp;
    // Without SP the LayerNorm / residual region (8 sbh) and the statistics stay whole.
    const double region = seq ? 8 * s * b * h / tt : 8 * s * b * h;
    const double stats = seq ? 16 * s * b / tt : 16 * s * b;
    const double split = 24 * s * b * h / tt, maps = 2 * a * s * s * b / tt;
    const double formula = region + split + maps + stats;
    const std::size_t measured = two - one;
    const std::string name = seq ? fmt("%d + SP", tp) : std::to_string(tp);
    t.add({name, format_bytes(measured), fmt("%.0f B", formula),
           fmt("%s %.0f + 24sbh/t %.0f + 2as^2b/t %.0f + %s %.0f", seq ? "8sbh/t" : "8sbh", region,
               split, maps, seq ? "16sb/t" : "16sb", stats)});
    checks.add({{seq ? fmt("tp %d + SP: activation bytes per layer = sbh(32 + 2as/h)/t + 16sb/t",
                           tp)
                     : fmt("tp %d: activation bytes per layer = sbh(8 + 24/t) + 2as^2b/t + 16sb",
                           tp),
                 fmt("%.0f", formula), std::to_string(measured), double(measured) == formula}});
  }
  std::printf(
      "\n== 3. Activation memory per layer and rank (bf16, s %d, b %d, h 32, a 4)\n%s"
      "   Korthikanti et al. 2022: sbh(34 + 5as/h) with dropout; this model has none, so the\n"
      "   two dropout masks (2 sbh) and the attention dropout (3as^2b) go: sbh(32 + 2as/h).\n"
      "   With tp the LayerNorm and residual region (x, ln_1, res2, ln_2: 8 sbh) stays whole,\n"
      "   qkv, attention output, c_fc and GELU output (24 sbh) and the maps split; 16sb is the\n"
      "   LayerNorms' FP32 mean and rstd. Sequence parallel splits the region and the statistics\n"
      "   too: sbh(32 + 2as/h)/t + 16sb/t, Korthikanti's sbh(34 + 5as/h)/t without dropout.\n",
      16, 2, t.str().c_str());
}

void print_bug(const std::string& bug, int steps, ClaimTable& checks) {
  TpRunConfig c;
  c.steps = steps;
  if (bug == "no-f-backward") {
    const TpRunResult one = train_tensor_parallel(c);
    c.tp = 2;
    c.bugs.skip_f_backward = true;
    const TpRunResult bad = train_tensor_parallel(c);
    const double dw = max_weight_difference(one, bad);
    std::printf("\n-- no-f-backward: f without its backward all-reduce (tp 2)\n"
                "   loss %.4f -> %.4f (it still falls); weights drift from tp 1 by %.2e\n",
                bad.loss.front(), bad.loss.back(), dw);
    checks.add({yes_claim("no-f-backward: the loss still falls", bad.loss.back() < bad.loss.front()),
                {"no-f-backward: the weights drift from tp 1", fmt("> %.0e", 10 * kTol),
                 fmt("%.2e", dw), dw > 10 * kTol},
                claim_broken_by(bug, tolerance_claim("no-f-backward run: tp 2 equals tp 1: "
                                                     "weights after " + std::to_string(steps) +
                                                     " steps",
                                                     dw, kTol))});
  } else if (bug == "norm-counts-replicas") {
    c.tp = 2;
    c.steps = 1;
    const TpRunResult r = train_tensor_parallel(c);
    c.max_grad_norm = 0.5 * (r.grad_norm[0] + r.naive_norm[0]);
    const int fine = train_tensor_parallel(c).clipped[0];
    c.norm_counts_replicas = true;
    const int early = train_tensor_parallel(c).clipped[0];
    std::printf("\n-- norm-counts-replicas: every tp rank counts the replicated parameters\n"
                "   count-once norm %.6f, every-rank norm %.6f; clip at %.6f: clipped %s vs %s\n",
                r.grad_norm[0], r.naive_norm[0], c.max_grad_norm, fine ? "yes" : "no",
                early ? "yes" : "no");
    checks.add({yes_claim("norm-counts-replicas: the norm is too large",
                          r.naive_norm[0] > r.grad_norm[0] * 1.01),
                yes_claim("norm-counts-replicas: clipping fires early", early == 1 && fine == 0),
                claim_broken_by(bug, tolerance_claim("norm-counts-replicas run: the norm equals "
                                                     "the count-once norm (relative)",
                                                     std::fabs(r.naive_norm[0] - r.grad_norm[0]) /
                                                         r.grad_norm[0],
                                                     kTol))});
  } else if (bug == "unmasked-padding") {
    c.model.vocab_size = 61;
    const TpRunResult one = train_tensor_parallel(c);
    c.tp = 2;
    c.bugs.unmasked_padding = true;
    const TpRunResult bad = train_tensor_parallel(c);
    const double dl = max_abs_difference(one.loss, bad.loss);
    std::printf("\n-- unmasked-padding: V 61 padded to 62, the padding logit left in the "
                "softmax (tp 2)\n   losses differ from tp 1 by %.2e\n",
                dl);
    checks.add({{"unmasked-padding: tp 2 no longer equals tp 1", fmt("> %.0e", 10 * kTol),
                 fmt("%.2e", dl), dl > 10 * kTol},
                claim_broken_by(bug, tolerance_claim("unmasked-padding run: tp 2, V 61 equals "
                                                     "tp 1: losses",
                                                     dl, kTol))});
  } else if (bug == "unsummed-layernorm") {
    c.tp = 2;
    c.sequence_parallel = true;
    const TpRunResult good = train_tensor_parallel(c);
    c.bugs.unsummed_replicated = true;
    const TpRunResult bad = train_tensor_parallel(c);
    std::printf("\n-- unsummed-layernorm: sequence parallel, the LayerNorm and row-parallel bias\n"
                "   gradients (partial: this rank's rows only) not summed over tp\n"
                "   max |difference| between the tp replicas: %.2e (summed: %.2e)\n",
                bad.replica_drift, good.replica_drift);
    checks.add({{"unsummed-layernorm: the tp replicas of the LayerNorms drift apart",
                 fmt("> %.0e", 10 * kTol), fmt("%.2e", bad.replica_drift),
                 bad.replica_drift > 10 * kTol && good.replica_drift == 0.0},
                claim_broken_by(bug, {"unsummed-layernorm run: SP: tp replicas of LayerNorms, "
                                      "biases, wpe stay bit-identical",
                                      "0", fmt("%.2e", bad.replica_drift),
                                      bad.replica_drift == 0.0})});
  } else if (bug == "heads-not-dividing") {
    c.tp = 3;  // 4 heads
    std::string error;
    try {
      train_tensor_parallel(c);
    } catch (const InputError& e) {
      error = e.what();
    }
    std::printf("\n-- heads-not-dividing: tp 3 with 4 heads\n   refused: %s\n", error.c_str());
    checks.add({yes_claim("heads-not-dividing: refused naming the numbers",
                          error.find("tp 3 does not divide n_head = 4") != std::string::npos),
                claim_broken_by(bug, {"heads-not-dividing run: tp 3 trains as tp 1 does",
                                      "trains", error.empty() ? "trains" : "refused",
                                      error.empty()})});
  }
}

// The figures' data (scripts/figures.py): how make_gpt2_registry splits the embedding, block 0
// and the final LayerNorm of the lesson's model over 2 tensor-parallel ranks; and part 2's
// context-parallel work per rank and traffic (cp_figure_data).
Json sharding_map() {
  constexpr int kTp = 2;
  const GptConfig model = TpRunConfig{}.model;
  const ParamRegistry reg = make_gpt2_registry(model, GptStage{}, TensorShard{0, kTp});
  Json params = Json::array();
  for (const ParamEntry& e : reg.entries()) {
    if (e.name.rfind("h.", 0) == 0 && e.name.rfind("h.0.", 0) != 0) continue;  // one block
    Json j = Json::object();
    j.set("name", e.name);
    Json shape = Json::array();
    for (std::int64_t d : e.shape) shape.push_back(d);
    j.set("shape", std::move(shape));
    Json held = Json::array();
    for (std::int64_t d : held_shape(e.shape, e.holding)) held.push_back(d);
    j.set("held_shape", std::move(held));
    j.set("split", std::string(param_split_name(e.holding.split)));
    j.set("column_groups", e.holding.column_groups);
    params.push_back(std::move(j));
  }
  Json out = Json::object();
  out.set("chapter", "ch06_tensor_parallel");
  out.set("tp", kTp);
  out.set("parameters", std::move(params));
  out.set("context_parallel", cp_figure_data());  // part 2's figure (ch06_cp_balance)
  return out;
}

int run(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  const TpDemoFlags flags = parse_tp_demo_flags(argc, argv);
  const std::string& bug = flags.bug;
  const int steps = flags.steps;
  std::printf("== ch06: tensor parallelism (tp ranks = threads, local backend)\n");
  ClaimTable checks(bug);
  const std::vector<std::string>& cp_bugs = cp_demo_bugs();
  const auto is_cp_bug = [&](const std::string& name) {
    return std::find(cp_bugs.begin(), cp_bugs.end(), name) != cp_bugs.end();
  };
  // The sections in the README's order: tensor parallelism's claims (1-3) and failure modes
  // (4), then context parallelism's claims (5-8, cp_report.h) and failure modes (9).
  const bool tp_bugs = bug == "all" || (bug != "none" && !is_cp_bug(bug));
  const bool cp_failures = bug == "all" || is_cp_bug(bug);
  if (bug == "all" || bug == "none") {
    print_equivalence(steps, checks);
    print_traffic(checks);
    print_memory(checks);
  }
  if (tp_bugs) {
    std::printf("\n== 4. Failure modes (tensor parallelism)\n");
    for (const std::string& name : tp_demo_bugs()) {
      if ((bug == "all" || bug == name) && !is_cp_bug(name)) print_bug(name, steps, checks);
    }
  }
  if (bug == "all" || bug == "none") print_context_parallel(steps, checks);
  if (cp_failures) {
    std::printf("\n== 9. Failure modes (context parallelism)\n");
    for (const std::string& name : tp_demo_bugs()) {
      if ((bug == "all" || bug == name) && is_cp_bug(name)) print_cp_bug(name, steps, checks);
    }
  }
  if (!flags.json_path.empty()) write_json_file(flags.json_path, sharding_map());
  const int failures = checks.print();
  std::printf("ran in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
