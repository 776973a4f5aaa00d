// ch04_ddp: the ring all-reduce chunk by chunk, who sends what (ring vs naive vs backend),
// DDP against one rank with the whole batch, where a step's time goes, and the four failure
// modes (--bug shows one of them alone). Every claim is checked: a failed claim exits with 1,
// a bad flag with 2. --trace FILE writes every rank's compute and communication spans.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ch04_ddp/ddp_demo_flags.h"
#include "ch04_ddp/ddp_scenarios.h"
#include "ch04_ddp/ring_lesson.h"
#include "report/claim_table.h"
#include "report/format.h"
#include "report/text_table.h"
#include "trace/chrome_trace.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace {

using namespace mixpar;
using namespace mixpar::ch04;

using Checks = ClaimTable;

void print_ring_trace(Checks& checks) {
  std::printf(
      "\n== 1. The ring, chunk by chunk: 3 ranks, 3 elements, rank r holds (i+1) x 10^r\n"
      "   reduce-scatter step s: rank r sends chunk r-s, receives chunk r-s-1 and adds its\n"
      "   own; after N-1 steps rank r owns chunk r+1. all-gather passes owned chunks on.\n%s",
      format_ring_trace(trace_all_reduce(3, 3, false)).c_str());
  const auto events = trace_all_reduce(3, 3, false);
  bool ok = true;
  for (int r = 0; r < 3; ++r) {
    const RingEvent& last_rs = events[std::size_t(r)][1];  // reduce-scatter step N-2 = 1
    const int owned = ring_owned_chunk(r, 3);
    ok = ok && last_rs.got_chunk == owned &&
         last_rs.result == std::vector<float>{111.0f * float(owned + 1)};
  }
  checks.add({yes_claim("after the reduce-scatter rank r holds chunk r+1, complete", ok)});
}

void print_traffic(int n, Checks& checks) {
  const std::int64_t numel = std::int64_t{1} << 18;  // 1 MiB of f32
  TextTable t({"algorithm", "rank 0 sends", "rank 0 receives", "rank 1 sends", "rank 1 receives",
               "busiest link / B"});
  for (AllReduceAlgo a : {AllReduceAlgo::kBackend, AllReduceAlgo::kRing, AllReduceAlgo::kNaive}) {
    const TrafficMeasure m = measure_traffic(a, n, numel);
    const double b = double(m.buffer_bytes);
    t.add({algo_name(a), format_bytes(m.per_rank[0].bytes_sent),
           format_bytes(m.per_rank[0].bytes_received), format_bytes(m.per_rank[1].bytes_sent),
           format_bytes(m.per_rank[1].bytes_received), fmt("%.3f", double(m.max_received()) / b)});
    // The ring's exact bytes: 2(N-1)/N B when N divides the element count; otherwise the
    // chunks differ by one element and the busiest rank receives up to two elements more
    // (all_reduce_traffic, communicator.h), which the claim must count, not round away.
    std::size_t want_bytes = static_cast<std::size_t>(n - 1) * m.buffer_bytes;
    if (a != AllReduceAlgo::kNaive) {
      want_bytes = 0;
      for (int r = 0; r < n; ++r) {
        want_bytes = std::max<std::size_t>(
            want_bytes, all_reduce_traffic(numel, DType::kF32, n, r).bytes_received);
      }
    }
    checks.add({{fmt("%s: busiest rank receives %s B", algo_name(a).c_str(),
                     a == AllReduceAlgo::kNaive ? "(N-1)" : "2(N-1)/N"),
                 fmt("%.3f B", double(want_bytes) / b),
                 fmt("%.3f B", double(m.max_received()) / b), m.max_received() == want_bytes}});
  }
  std::printf(
      "\n== 2. Who sends what: one all-reduce of 1 MiB (f32) on %d ranks, as recorded\n%s"
      "   The ring's links each carry 2(N-1)/N B whatever N; the naive root's carries "
      "(N-1) B.\n",
      n, t.str().c_str());
}

void print_scenario(const ScenarioResult& r, Checks& checks) {
  std::printf("\n-- %s\n   expect: %s\n%s", r.title.c_str(), r.symptom.c_str(), r.table.c_str());
  checks.add(r.claims);
}

void print_ddp(int n, int steps, Checks& checks) {
  LessonConfig c;
  c.steps = steps;
  std::printf(
      "\n== 3. DDP against one rank with the whole batch (GPT %lldL x %lld, B=%lld T=%lld)\n",
      (long long)c.model.n_layer, (long long)c.model.n_embd, (long long)c.B, (long long)c.T);
  print_scenario(equivalence_scenario(n, c), checks);
  print_scenario(accumulation_scenario(2, 3, c), checks);
  print_scenario(unscale_order_scenario(n, c), checks);
}

// The figure's data (scripts/figures.py): every hop of the ring on `ranks` ranks, and the
// spans of the timing run with 128 KiB buckets (machine-dependent times).
Json figure_data(int ranks, const std::vector<TraceSpan>& spans) {
  Json events = Json::array();
  for (const auto& per_rank : trace_all_reduce(ranks, ranks, false)) {
    for (const RingEvent& e : per_rank) {
      Json j = Json::object();
      j.set("phase", e.phase);
      j.set("step", e.step);
      j.set("rank", e.rank);
      j.set("to", e.to);
      j.set("from", e.from);
      j.set("sent_chunk", e.sent_chunk);
      j.set("got_chunk", e.got_chunk);
      events.push_back(std::move(j));
    }
  }
  Json ring = Json::object();
  ring.set("ranks", ranks);
  ring.set("events", std::move(events));
  Json list = Json::array();
  for (const TraceSpan& s : spans) {
    Json j = Json::object();
    j.set("name", s.name);
    j.set("cat", s.cat);
    j.set("rank", s.rank);
    j.set("thread", s.thread);
    j.set("start_us", s.start_us);
    j.set("dur_us", s.dur_us);
    list.push_back(std::move(j));
  }
  Json timeline = Json::object();
  timeline.set("spans", std::move(list));
  Json out = Json::object();
  out.set("chapter", "ch04_ddp");
  out.set("ring", std::move(ring));
  out.set("timeline", std::move(timeline));
  return out;
}

void print_time_split(int n, const std::string& trace_path, std::vector<TraceSpan>& spans,
                      bool keep_spans) {
  const LessonConfig c = timing_config();
  const auto rows =
      measure_time_split(n, c, trace_path.empty() && !keep_spans ? nullptr : &spans);
  TextTable t({"layout", "buckets", "compute ms", "comm ms", "exposed comm ms"});
  for (const TimeSplitRow& r : rows) {
    t.add({r.layout, std::to_string(r.buckets), fmt("%.2f", r.compute_ms), fmt("%.2f", r.comm_ms),
           fmt("%.2f", r.exposed_ms)});
  }
  std::printf(
      "\n== 4. Where a step's time goes (%d ranks, GPT %lldL x %lld, B=%lld T=%lld, "
      "mean per step)\n%s",
      n, (long long)c.model.n_layer, (long long)c.model.n_embd, (long long)c.B, (long long)c.T,
      t.str().c_str());
  std::printf("   GptModel reports gradient readiness during backward: %s\n",
              model_reports_grad_ready()
                  ? "yes: buckets leave while backward runs; exposed is what it did not hide"
                  : "no: buckets start when backward returns (the post-backward path), so all "
                    "communication is exposed; see the README for the hook");
  if (!trace_path.empty()) {
    write_chrome_trace(trace_path, spans);
    std::printf("   Chrome trace of the 128 KiB run: %s (chrome://tracing or ui.perfetto.dev)\n",
                trace_path.c_str());
  }
}

int run(int argc, char** argv) {
  const auto start = std::chrono::steady_clock::now();
  const DdpDemoFlags flags = parse_ddp_demo_flags(argc, argv);
  const std::string& bug = flags.bug;
  const int n = flags.ranks, steps = flags.steps;
  const std::string &trace_path = flags.trace_path, &json_path = flags.json_path;
  std::printf("== ch04: data parallel and the ring (%d ranks = %d threads, local backend)\n", n, n);
  Checks checks(bug);
  const bool everything = bug == "all" || bug == "none";
  std::vector<TraceSpan> spans;
  if (everything) {
    print_ring_trace(checks);
    print_traffic(n, checks);
    print_ddp(n, steps, checks);
    print_time_split(2, trace_path, spans, !json_path.empty());
  }
  if (!json_path.empty()) write_json_file(json_path, figure_data(4, spans));
  if (bug != "none") {
    std::printf("\n== 5. Failure modes, each beside its fix\n");
    LessonConfig c;
    c.steps = steps;
    for (const std::string& name : bug_names()) {
      if (bug == "all" || bug == name) print_scenario(bug_scenario(name, n, c), checks);
    }
  }
  const int failures = checks.print();
  std::printf("ran in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
