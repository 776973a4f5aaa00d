#include "ch06_tensor_parallel/cp_report.h"

#include <cmath>
#include <cstdio>

#include "ch06_tensor_parallel/cp_lesson.h"
#include "report/format.h"
#include "report/text_table.h"

namespace mixpar::ch06 {
namespace {

// Weights of order 1 after the steps, each adding lr x a gradient whose cp-split sums differ
// from one device's in rounding only (tests/ch06/context_parallel_test.cpp).
constexpr double kTrainTol = 1e-5;

std::string algo_str(CpAlgo a) { return std::string(cp_algo_name(a)); }
std::string split_str(CpSplit s) { return std::string(cp_split_name(s)); }

void print_equivalence(int steps, ClaimTable& checks) {
  const CpCase shape;
  TextTable t(
      {"algorithm", "cp", "split", "output error", "tolerance", "input grad error", "tolerance"});
  struct Run {
    CpAlgo algo;
    CpSplit split;
  };
  for (const Run& run :
       {Run{CpAlgo::kRing, CpSplit::kContiguous}, Run{CpAlgo::kRing, CpSplit::kZigzag},
        Run{CpAlgo::kAllToAll, CpSplit::kZigzag}}) {
    for (int cp : {2, 4}) {
      const CpCase c = CpCase::of(cp, run.algo, run.split);
      const CpCaseResult r = run_cp_case(c);
      const double to = cp_output_tolerance(c, r.out_scale),
                   tg = cp_grad_tolerance(c, r.grad_scale);
      t.add({algo_str(run.algo), std::to_string(cp), split_str(run.split), fmt("%.2e", r.out_error),
             fmt("%.2e", to), fmt("%.2e", r.grad_error), fmt("%.2e", tg)});
      const std::string name = fmt("%s cp %d %s equals one device", algo_str(run.algo).c_str(), cp,
                                   split_str(run.split).c_str());
      checks.add({tolerance_claim(name + ": attention output", r.out_error, to),
                  tolerance_claim(name + ": input gradient", r.grad_error, tg)});
      if (run.algo == CpAlgo::kAllToAll) {
        checks.add(
            {yes_claim(fmt("all-to-all cp %d: bit-identical to one device (whole heads)", cp),
                       r.out == r.ref_out && r.dqkv == r.ref_dqkv)});
      }
    }
  }
  std::printf(
      "\n== 5. Context parallelism: one causal attention layer split by sequence equals one "
      "device\n"
      "   (B %lld, T %lld, C %lld, %lld heads, f32; forward and backward; cp ranks = threads)\n%s"
      "   tolerance (2T + 8cp) u max|value| for the output, 3x for the gradient: the ring only\n"
      "   regroups each softmax sum into blocks merged by log-sum-exp (derivation in the README)\n",
      static_cast<long long>(shape.B), static_cast<long long>(shape.T),
      static_cast<long long>(shape.C), static_cast<long long>(shape.n_head), t.str().c_str());
  // Training: the q|k|v projection through cp attention, gradients summed over cp.
  CpTrainConfig tc;
  tc.steps = steps;
  tc.cp = 1;
  const CpTrainResult one = train_cp_attention(tc);
  TextTable tt({"run", "loss step 1", "loss last", "max |d weight|", "replica hashes"});
  tt.add(
      {"cp 1 (one device)", fmt("%.6f", one.loss.front()), fmt("%.6f", one.loss.back()), "-", "-"});
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      tc.cp = cp;
      tc.algo = algo;
      const CpTrainResult r = train_cp_attention(tc);
      const double dw = max_abs_diff(r.weight, one.weight);
      const std::string name = fmt("%s cp %d", algo_str(algo).c_str(), cp);
      tt.add({name, fmt("%.6f", r.loss.front()), fmt("%.6f", r.loss.back()), fmt("%.2e", dw),
              r.first_drift_step == 0 ? "equal every step"
                                      : fmt("part at step %d", r.first_drift_step)});
      checks.add({tolerance_claim(fmt("%s: weights after %d steps equal cp 1", name.c_str(), steps),
                                  dw, kTrainTol),
                  yes_claim(name + ": cp replicas stay bit-identical (gradients summed over cp)",
                            r.first_drift_step == 0 && r.replica_drift == 0.0)});
    }
  }
  std::printf(
      "\n   %d SGD steps of the layer's q|k|v projection (replicated over cp) through it:\n%s",
      steps, tt.str().c_str());
  checks.add({yes_claim("cp: the loss falls on one device", one.loss.back() < one.loss.front())});
}

void print_traffic(ClaimTable& checks) {
  TextTable t({"algorithm", "cp", "fwd bytes/rank", "formula", "bwd bytes/rank", "formula"});
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      const CpCase c = CpCase::of(cp, algo, CpSplit::kZigzag);
      const CpCaseResult r = run_cp_case(c);
      const CpTraffic f = cp_traffic_formula(algo, cp, c.B, c.T / cp, c.C, 4);
      bool all = true;
      for (int k = 0; k < cp; ++k) {
        all = all && double(r.forward_bytes[static_cast<std::size_t>(k)]) == f.forward &&
              double(r.backward_bytes[static_cast<std::size_t>(k)]) == f.backward;
      }
      t.add({algo_str(algo), std::to_string(cp), std::to_string(r.forward_bytes[0]),
             fmt("%.0f", f.forward), std::to_string(r.backward_bytes[0]), fmt("%.0f", f.backward)});
      checks.add(
          {{fmt("%s cp %d: bytes every rank sends per layer = formula", algo_str(algo).c_str(), cp),
            fmt("%.0f + %.0f", f.forward, f.backward),
            fmt("%zu + %zu", r.forward_bytes[0], r.backward_bytes[0]), all}});
    }
  }
  std::printf(
      "\n== 6. Bytes each rank sends per attention layer (from the cp communicator; B 2, T 32, "
      "C 32, f32)\n%s"
      "   ring: forward (cp-1) x 2 B(T/cp)C (K and V), backward (cp-1) x 4 B(T/cp)C + 2 B(T/cp)C\n"
      "   (K, V and their gradients; dK, dV take one more hop home); all-to-all: (cp-1)/cp x\n"
      "   4 B(T/cp)C each way (q, k, v out and the output back; dO out and dq, dk, dv back)\n",
      t.str().c_str());
}

void print_work(ClaimTable& checks) {
  constexpr int kCp = 4;
  TextTable t({"split", "rank", "chunks held", "full", "diagonal", "skipped", "scores computed"});
  for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag}) {
    const CpCase c = CpCase::of(kCp, CpAlgo::kRing, split);
    const CpCaseResult r = run_cp_case(c);
    const CpLayout layout = cp_layout(c.T, kCp, split);
    for (int k = 0; k < kCp; ++k) {
      const CpWork& w = r.work[static_cast<std::size_t>(k)];
      std::string held;
      for (const SeqChunk& ch : layout.chunks[static_cast<std::size_t>(k)]) {
        held += (held.empty() ? "" : ", ") + fmt("%lld-%lld", static_cast<long long>(ch.begin),
                                                 static_cast<long long>(ch.begin + ch.count - 1));
      }
      t.add({split_str(split), std::to_string(k), held, std::to_string(w.full),
             std::to_string(w.diagonal), std::to_string(w.skipped), std::to_string(w.scores)});
      const CpWork e = expected_work(layout, k);
      checks.add({{fmt("%s rank %d: block pairs the ring computed = the split's count",
                       split_str(split).c_str(), k),
                   fmt("%lld full, %lld diagonal", static_cast<long long>(e.full),
                       static_cast<long long>(e.diagonal)),
                   fmt("%lld full, %lld diagonal", static_cast<long long>(w.full),
                       static_cast<long long>(w.diagonal)),
                   e.full == w.full && e.diagonal == w.diagonal && e.scores == w.scores}});
    }
    const double imb = work_imbalance(r.work);
    const double want = split == CpSplit::kZigzag ? 1.0 : 2.0 * kCp / (kCp + 1);
    checks.add({{fmt("cp %d %s: max / mean work per rank", kCp, split_str(split).c_str()),
                 fmt("%.3f", want), fmt("%.3f", imb), std::fabs(imb - want) < 1e-12}});
    t.add({"", "", fmt("max/mean %.3f", imb), "", "", "", ""});
  }
  std::printf(
      "\n== 7. Attention work per rank, ring cp %d, T 32 (block pairs of chunks; scores = q.k "
      "products\n   per batch and head, a diagonal block computed whole and masked)\n%s"
      "   contiguous: rank r computes r full blocks and 1 diagonal, the last ~2cp/(cp+1) x the\n"
      "   mean; zigzag (chunks r and 2cp-1-r of 2cp): every rank 2cp-1 full and 2 diagonal\n",
      kCp, t.str().c_str());
}

void print_memory(ClaimTable& checks) {
  const CpCase shape;
  const double B = double(shape.B), T = double(shape.T), C = double(shape.C),
               H = double(shape.n_head);
  TextTable t({"run", "activations/rank (ledger)", "formula", "terms"});
  const CpCaseResult base = run_cp_case(CpCase::of(1, CpAlgo::kRing, CpSplit::kZigzag));
  const double one_formula = 4 * (4 * B * T * C + B * H * T * T);
  t.add({"one device", std::to_string(base.one_device_activation_bytes), fmt("%.0f", one_formula),
         "4 x (qkv + out 4BTC + probabilities B H T^2)"});
  checks.add({{"one device: attention activations = 4 (4BTC + BHT^2) bytes",
               fmt("%.0f", one_formula), std::to_string(base.one_device_activation_bytes),
               double(base.one_device_activation_bytes) == one_formula}});
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      const CpCaseResult r = run_cp_case(CpCase::of(cp, algo, CpSplit::kZigzag));
      const double formula =
          algo == CpAlgo::kRing
              ? 4 * (4 * B * T * C + B * H * T) / cp
              : 4 * (4 * B * T * C / cp + 3 * B * T * C / cp + B * H * T * T / cp);
      const std::string terms = algo == CpAlgo::kRing
                                    ? "4 x (4BTC + B H T log-sum-exps) / cp"
                                    : "4 x (4BTC + head group's 3BTC + BHT^2) / cp";
      t.add({fmt("%s cp %d", algo_str(algo).c_str(), cp), std::to_string(r.activation_bytes[0]),
             fmt("%.0f", formula), terms});
      bool all = true;
      for (std::size_t b : r.activation_bytes) all = all && double(b) == formula;
      checks.add({{fmt("%s cp %d: activation bytes per rank = %s", algo_str(algo).c_str(), cp,
                       terms.c_str()),
                   fmt("%.0f", formula), std::to_string(r.activation_bytes[0]), all}});
    }
  }
  std::printf(
      "\n== 8. Attention activations per rank after forward (the ledger's kActivations, f32)\n%s"
      "   the ring never holds a T x T block: its blocks are (T/2cp)^2 and transient; what it "
      "keeps\n"
      "   is 1/cp of the rows and one log-sum-exp per row and head. All-to-all keeps whole heads'\n"
      "   T x T probabilities (this kernel stores them), 1/cp of them.\n",
      t.str().c_str());
}

}  // namespace

const std::vector<std::string>& cp_demo_bugs() {
  static const std::vector<std::string> bugs = {"unmasked-diagonal", "skipped-lse-merge",
                                                "unsummed-cp-gradients", "contiguous-positions"};
  return bugs;
}

Json cp_figure_data() {
  constexpr int kCp = 4;
  Json out = Json::object();
  out.set("cp", kCp);
  out.set("seq_len", CpCase{}.T);
  Json work = Json::object(), chunks = Json::object();
  for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag}) {
    const CpCaseResult r = run_cp_case(CpCase::of(kCp, CpAlgo::kRing, split));
    Json scores = Json::array();
    for (const CpWork& w : r.work) scores.push_back(w.scores);
    work.set(split_str(split), std::move(scores));
    Json held = Json::array();
    for (const auto& rank : cp_layout(CpCase{}.T, kCp, split).chunks) {
      Json list = Json::array();
      for (const SeqChunk& c : rank) {
        Json one = Json::array();
        one.push_back(c.begin);
        one.push_back(c.count);
        list.push_back(std::move(one));
      }
      held.push_back(std::move(list));
    }
    chunks.set(split_str(split), std::move(held));
  }
  out.set("scores_per_rank", std::move(work));
  out.set("chunks", std::move(chunks));
  Json traffic = Json::array();
  for (CpAlgo algo : {CpAlgo::kRing, CpAlgo::kAllToAll}) {
    for (int cp : {2, 4}) {
      const CpCaseResult r = run_cp_case(CpCase::of(cp, algo, CpSplit::kZigzag));
      Json t = Json::object();
      t.set("algorithm", algo_str(algo));
      t.set("cp", cp);
      t.set("forward_bytes", static_cast<std::int64_t>(r.forward_bytes[0]));
      t.set("backward_bytes", static_cast<std::int64_t>(r.backward_bytes[0]));
      traffic.push_back(std::move(t));
    }
  }
  out.set("traffic_per_layer", std::move(traffic));
  return out;
}

void print_context_parallel(int steps, ClaimTable& checks) {
  std::printf("\n== Part 2: context parallelism (cp ranks = threads, local backend)\n");
  print_equivalence(steps, checks);
  print_traffic(checks);
  print_work(checks);
  print_memory(checks);
}

void print_cp_bug(const std::string& bug, int steps, ClaimTable& checks) {
  CpCase c = CpCase::of(2, CpAlgo::kRing, CpSplit::kZigzag);
  if (bug == "unmasked-diagonal") {
    c.bugs.unmasked_diagonal = true;
    const CpCaseResult base = run_cp_case(c);
    c.perturb_position = 1;
    const CpCaseResult changed = run_cp_case(c);
    double moved = 0;
    for (std::int64_t i = 0; i < c.C; ++i) {
      moved = std::max(moved, double(std::fabs(base.out[static_cast<std::size_t>(i)] -
                                               changed.out[static_cast<std::size_t>(i)])));
    }
    std::printf(
        "\n-- unmasked-diagonal: the diagonal block pair computed like a full one (ring cp 2)\n"
        "   position 0's output moves by %.2e when token 1's key and value change: the\n"
        "   model (and its loss) sees the future; output error against one device %.2e\n",
        moved, base.out_error);
    checks.add({{"unmasked-diagonal: position 0's output moves when token 1 changes", "> 1e-03",
                 fmt("%.2e", moved), moved > 1e-3}});
    checks.add({claim_broken_by(bug, {"unmasked-diagonal run: position 0's output ignores token 1 "
                                      "(causal)",
                                      "0", fmt("%.2e", moved), moved == 0.0})});
  } else if (bug == "skipped-lse-merge") {
    c.bugs.skip_lse_merge = true;
    const CpCaseResult r = run_cp_case(c);
    const double tol = cp_output_tolerance(c, r.out_scale);
    std::printf(
        "\n-- skipped-lse-merge: each block's partial output added without its\n"
        "   log-sum-exp weight (ring cp 2): output off by %.2e (values up to %.2f)\n",
        r.out_error, r.out_scale);
    checks.add({{"skipped-lse-merge: the output is off by more than 100x the tolerance",
                 fmt("> %.0e", 100 * tol), fmt("%.2e", r.out_error), r.out_error > 100 * tol}});
    checks.add({claim_broken_by(bug, tolerance_claim("skipped-lse-merge run: ring cp 2 zigzag "
                                                     "equals one device: attention output",
                                                     r.out_error, tol))});
  } else if (bug == "unsummed-cp-gradients") {
    CpTrainConfig tc;
    tc.steps = steps;
    tc.sum_gradients = false;
    const CpTrainResult r = train_cp_attention(tc);
    std::printf(
        "\n-- unsummed-cp-gradients: the replicated weights' gradients not summed over cp\n"
        "   (ring cp 2): each rank steps on its own rows' gradient; the replica hash parts\n"
        "   at step %d, and after %d steps the replicas differ by %.2e\n",
        r.first_drift_step, steps, r.replica_drift);
    checks.add({yes_claim("unsummed-cp-gradients: the replica hash parts at step 1",
                          r.first_drift_step == 1)});
    checks.add(
        {claim_broken_by(bug, {"unsummed-cp-gradients run: cp replicas stay bit-identical "
                               "(replica hash)",
                               "equal every step",
                               r.first_drift_step == 0 ? "equal every step"
                                                       : fmt("part at step %d", r.first_drift_step),
                               r.first_drift_step == 0})});
  } else if (bug == "contiguous-positions") {
    c.positions_as_contiguous = true;
    const CpCaseResult r = run_cp_case(c);
    const double tol = cp_output_tolerance(c, r.out_scale);
    std::printf(
        "\n-- contiguous-positions: rows split zigzag, masked as if the split were\n"
        "   contiguous (ring cp 2): output off by %.2e\n",
        r.out_error);
    checks.add({{"contiguous-positions: the output is off by more than 100x the tolerance",
                 fmt("> %.0e", 100 * tol), fmt("%.2e", r.out_error), r.out_error > 100 * tol}});
    checks.add({claim_broken_by(bug, tolerance_claim("contiguous-positions run: ring cp 2 zigzag "
                                                     "equals one device: attention output",
                                                     r.out_error, tol))});
  }
}

}  // namespace mixpar::ch06
