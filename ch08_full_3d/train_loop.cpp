// The loop of train_gpt. What is printed before the first step is what source article B
// (docs/SOURCES.md) asks to check before spending compute: model and data, precision,
// clipping, the memory the model states will take; what is printed every step are the signals
// to watch while it runs.
#include "train_loop.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "async_checkpoint.h"
#include "checkpoint.h"
#include "comm/control.h"
#include "comm/local_backend.h"
#include "config_agreement.h"
#include "io/tokenizer.h"
#include "ops/compute_threads.h"
#include "ops/reductions.h"
#include "gemm_peak.h"
#include "model_flops.h"
#include "moe_flags.h"
#include "preflight.h"
#include "run_watch.h"
#include "run_checks.h"
#include "sampler.h"
#include "train_log.h"
#include "trainer.h"
#include "training_data.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

// printf into a string: the pre-flight lines are short.
template <class... Args>
std::string strf(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}


std::string model_line(const TrainerConfig& c) {
  const GptConfig& m = c.model;
  const std::string origin =
      c.init_from.empty() ? strf("GPT-2 init, seed %llu", static_cast<unsigned long long>(c.seed))
                          : "from " + c.init_from;
  return strf(
      "model: GPT-2, %lld layers, %lld heads, width %lld, %lld positions, vocab %lld: "
      "%.2fM parameters (%s)",
      static_cast<long long>(m.n_layer), static_cast<long long>(m.n_head),
      static_cast<long long>(m.n_embd), static_cast<long long>(m.n_positions),
      static_cast<long long>(m.vocab_size), static_cast<double>(m.num_parameters()) / 1e6,
      origin.c_str()) + moe_log_line(c);
}

std::string data_line(const Trainer& t) {
  const TrainerConfig& c = t.config();
  const std::string ranks =
      c.dp > 1 ? strf("%d ranks x ", c.dp) : std::string();
  return strf(
      "data: %s, %s order | %s%lld sequences x %lld tokens x %lld micro-batches = %lld "
      "tokens/step",
      t.data().description.c_str(), std::string(data_order_name(c.data_order)).c_str(),
      ranks.c_str(), static_cast<long long>(c.batch), static_cast<long long>(c.seq),
      static_cast<long long>(c.grad_accum), static_cast<long long>(c.tokens_per_step()));
}

// Distributed only: the grid, where the ranks run and how their gradients meet.
std::string parallel_line(Trainer& t) {
  const TrainerConfig& c = t.config();
  const std::string where = c.backend == CommBackend::kMpi
                                ? std::string("MPI, one process per rank")
                                : std::string("local backend, threads of this process");
  const std::string init = c.init_sync == InitSync::kBroadcast
                               ? std::string("rank 0's initial weights broadcast")
                               : std::string("one seed on every rank, checked by hash");
  return strf(
      "parallel: dp %d x tp %d x pp %d grid over %d ranks (%s) | %s of %lld sequences | %s%s",
      c.dp, c.tp, c.pp, c.ranks, where.c_str(), t.grad_sync().describe().c_str(),
      static_cast<long long>(c.sequences_per_step()), init.c_str(),
      c.pp > 1 ? ("\npipeline: " + t.schedule().describe()).c_str() : "");
}

std::string precision_line(const TrainerConfig& c) {
  const std::string how = c.dtype == DType::kF32 ? std::string("FP32 everywhere, no loss scaling")
                          : c.dtype == DType::kF16
                              ? strf(
                                    "16-bit working copy, FP32 master weights, dynamic loss "
                                    "scale from %g",
                                    c.loss_scale)
                              : std::string(
                                    "16-bit working copy, FP32 master weights, no loss "
                                    "scaling (bf16 has FP32's exponent range)");
  // --dtype fp8: the blocks' GEMMs in FP8 on that bf16 run (chapter 3's last part).
  std::string fp8;
  if (c.fp8) {
    fp8 = strf(" | FP8 GEMMs, %s scaling", std::string(fp8::name(c.fp8->recipe)).c_str());
    if (c.fp8->recipe == fp8::Recipe::kDelayed) {
      fp8 += strf(" (amax history %d, margin %d)", c.fp8->amax_history, c.fp8->margin);
    }
  }
  return strf("precision: %s (%s)%s%s", std::string(dtype_name(c.dtype)).c_str(), how.c_str(),
              fp8.c_str(), c.recompute ? " | activation recompute" : "");
}

std::string optimizer_line(const TrainerConfig& c) {
  const LrSchedule& s = c.schedule;
  const std::string decay = s.kind == LrScheduleKind::kCosine ? strf(", cosine to %g", s.min_lr)
                                                              : std::string(", then constant");
  const std::string clip = c.grad_clip > 0 ? strf("%g", c.grad_clip) : std::string("off");
  return strf(
      "optimizer: AdamW lr %g (warmup %lld%s), betas %g/%g, eps %g, weight decay %g on "
      "2-D weights only, clip %s",
      s.lr, static_cast<long long>(s.warmup_steps), decay.c_str(), c.beta1, c.beta2, c.eps,
      c.weight_decay, clip.c_str());
}

std::string memory_line(const TrainerConfig& c) {
  const MemoryLedger& l = current_ledger();  // this rank's: every replica holds the same
  // The run's one FLOP count (model_flops.h): the same the log's `flops` and the MFU use
  // (with MoE blocks the nominal count: each step logs its routed one).
  const double flops = grid_flops_per_step(c);
  if (c.offload_optimizer) {
    // The ledger's two sides: the device keeps the working copy and its gradients, the host
    // the masters, the FP32 gradient copy and the moments (ZeRO-Offload).
    return strf(
        "memory%s: device: parameters %s, gradients %s | host (offloaded): master weights %s, "
        "optimizer state %s, FP32 gradients %s | %.2f model GFLOP/step (model_flops.h)",
        c.distributed() ? " per rank" : "", format_bytes(l.live(MemCategory::kParameters)).c_str(),
        format_bytes(l.live(MemCategory::kGradients)).c_str(),
        format_bytes(l.host_live(MemCategory::kMasterParams)).c_str(),
        format_bytes(l.host_live(MemCategory::kOptimizerState)).c_str(),
        format_bytes(l.host_live(MemCategory::kGradients)).c_str(), flops / 1e9);
  }
  return strf(
      "memory%s: parameters %s, gradients %s, master weights %s, optimizer state %s | "
      "%.2f model GFLOP/step (model_flops.h)",
      c.distributed() ? " per rank" : "", format_bytes(l.live(MemCategory::kParameters)).c_str(),
      format_bytes(l.live(MemCategory::kGradients)).c_str(),
      format_bytes(l.live(MemCategory::kMasterParams)).c_str(),
      format_bytes(l.live(MemCategory::kOptimizerState)).c_str(), flops / 1e9);
}

void print_preflight(Trainer& t, std::FILE* out) {
  const TrainerConfig& c = t.config();
  std::vector<std::string> lines = {model_line(c), data_line(t), precision_line(c),
                                    optimizer_line(c), memory_line(c)};
  if (t.distributed()) lines.insert(lines.begin() + 2, parallel_line(t));
  for (const std::string& line : lines) std::fprintf(out, "%s\n", line.c_str());
}

std::int64_t context_of(const TrainerConfig& c) { return std::min(c.seq, c.model.n_positions); }

double print_eval(Trainer& t, std::FILE* out) {
  const AdditionScore s =
      evaluate_addition(t.eval_model(), t.data().heldout, context_of(t.config()));
  std::fprintf(out, "eval step %lld: held-out accuracy %.1f%% (%lld/%lld)",
               static_cast<long long>(t.step()), 100.0 * s.accuracy,
               static_cast<long long>(s.correct), static_cast<long long>(s.total));
  // The model's bytes as they came (a half-trained one writes any byte): escaped.
  if (!s.mistakes.empty()) std::fprintf(out, ", e.g. %s", escape_bytes(s.mistakes.front()).c_str());
  std::fprintf(out, "\n");
  return s.accuracy;
}

// "\"12+34=\"" with newlines shown as \n, for one-line headers.
std::string printable(const std::string& text) {
  std::string q = "\"";
  for (char ch : text) {
    if (ch == '\n')
      q += "\\n";
    else
      q += ch;
  }
  return q + "\"";
}

// The validation loss (--val-data): the mean loss of the eval model over the first
// val_batches windows of dp x batch rows of seq tokens (fewer when the file is shorter), each
// row's targets its tokens shifted by one, as training reads them. The windows hold a global
// batch's rows, so a grid and one device on the same global batch score the same tokens.
std::int64_t validation_windows(const Trainer& t) {
  const TrainerConfig& c = t.config();
  const std::int64_t window = c.dp * c.batch * c.seq;
  return std::min(c.val_batches,
                  (static_cast<std::int64_t>(t.data().val_tokens->size()) - 1) / window);
}

double validation_loss(Trainer& t) {
  const TrainerConfig& c = t.config();
  const std::vector<std::uint16_t>& v = *t.data().val_tokens;
  const std::int64_t rows = c.dp * c.batch, window = rows * c.seq;
  const std::int64_t windows = validation_windows(t);
  std::vector<std::int32_t> x(static_cast<std::size_t>(window)), y(x.size());
  double sum = 0.0;
  for (std::int64_t k = 0; k < windows; ++k) {
    const auto at = static_cast<std::size_t>(k * window);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = v[at + i];
      y[i] = v[at + i + 1];
    }
    sum += t.eval_model().forward(x, y, rows, c.seq);
  }
  return sum / static_cast<double>(windows);
}

double print_validation(Trainer& t, std::FILE* out) {
  const double loss = validation_loss(t);
  const TrainerConfig& c = t.config();
  const std::int64_t scored = validation_windows(t) * c.dp * c.batch * c.seq;
  std::fprintf(out, "validation at step %lld: loss %.4f on the first %lld tokens of %s\n",
               static_cast<long long>(t.step()), loss, static_cast<long long>(scored),
               t.data().val_description.c_str());
  return loss;
}

void print_sample(Trainer& t, std::FILE* out) {
  const TrainerConfig& c = t.config();
  const TrainingData& data = t.data();
  std::string prompt = c.prompt;
  if (prompt.empty() && !data.heldout.empty() && !data.tokenizer) {
    prompt.push_back('\n');  // a problem starts after a newline, as in training
    prompt += data.heldout.front().prompt();
  }
  const std::vector<std::int32_t> ids = encode_prompt(prompt, data);
  // A shard holds ids only a tokenizer can print; without one they are printed as numbers,
  // unless the model's vocabulary is the 256 bytes (a byte shard, build/text-data/char_*.bin).
  const bool bytes =
      !data.tokenizer && (!is_token_shard_path(c.data) || c.model.vocab_size <= 256);
  const std::int64_t limit =
      data.tokenizer ? std::min<std::int64_t>(data.tokenizer->vocab_size(), c.model.vocab_size)
      : bytes        ? std::min<std::int64_t>(256, c.model.vocab_size)
                     : c.model.vocab_size;
  const std::vector<std::int32_t> gen = generate(t.eval_model(), ids, c.sample, context_of(c),
                                                 limit, c.temperature, c.sample_seed,
                                                 c.sample_top_k);
  std::string how = c.temperature > 0 ? strf("temperature %g, seed %llu", c.temperature,
                                             static_cast<unsigned long long>(c.sample_seed))
                                      : std::string("greedy");
  if (c.temperature > 0 && c.sample_top_k > 0) {
    how += strf(", top-k %lld", static_cast<long long>(c.sample_top_k));
  }
  if (data.tokenizer) {
    std::fprintf(out, "sample (%s, prompt %s, GPT-2 tokens):\n", how.c_str(),
                 prompt.empty() ? "<|endoftext|>" : printable(prompt).c_str());
    std::fprintf(out, "%s%s\n", prompt.c_str(), data.tokenizer->decode_for_display(gen).c_str());
    return;
  }
  std::fprintf(out, "sample (%s, prompt %s):\n", how.c_str(),
               prompt.empty() ? "a newline" : printable(prompt).c_str());
  if (bytes) {
    std::fprintf(out, "%s%s\n", prompt.c_str(), ByteTokenizer::decode(std::span(gen)).c_str());
    return;
  }
  for (std::int32_t id : gen) std::fprintf(out, "%d ", id);
  std::fprintf(out, "\n");
}

// The prompt's bytes, else "\n" + the first held-out problem, else the data's first tokens.
std::vector<std::int32_t> probe_tokens(const Trainer& t) {
  const TrainerConfig& c = t.config();
  std::string text = c.prompt;
  if (text.empty() && !t.data().heldout.empty()) {
    text.push_back('\n');  // not "\n" + string: GCC 12's false -Wrestrict (bug 105329)
    text += t.data().heldout.front().prompt();
  }
  std::vector<std::int32_t> ids = encode_prompt(text, t.data());
  if (ids.empty()) ids.assign(t.data().tokens->begin(), t.data().tokens->begin() + c.seq);
  const auto context = static_cast<std::size_t>(context_of(c));
  if (ids.size() > context) ids.resize(context);
  return ids;
}

bool due(std::int64_t step, std::int64_t every) { return every > 0 && step % every == 0; }

// A fresh run into a directory that holds another run's checkpoints would interleave the two
// (and move `latest` back): refused unless --resume says to continue that run.
void check_fresh_checkpoint_dir(const TrainerConfig& c) {
  if (c.checkpoint_dir.empty() || c.resume) return;
  check_fresh_checkpoint_root(c.checkpoint_dir);
}

// What rank 0 alone writes or holds, checked before step 1 (run_checks.h): its outputs, and
// the lock on the checkpoint directory (one run at a time), kept until the run ends.
void check_lead_outputs(const TrainerConfig& c, std::optional<CheckpointDirLock>& lock) {
  check_outputs(c);
  if (!c.checkpoint_dir.empty()) lock.emplace(c.checkpoint_dir);
}

// What one rank's run keeps besides the model: its log and its spans.
struct RankRun {
  Trainer& t;
  std::FILE* out;  // rank 0: the run's output; other ranks: null (they train silently)
  std::optional<JsonlLog> log;
  std::vector<TraceSpan> spans;  // kept only when --trace asks for them
  GemmPeak peak;                 // rank 0: what MFU is measured against (gemm_peak.h)
  Communicator* comm = nullptr;  // the world (null: the single device)
  // --checkpoint-async: the background writer and the checkpoint it is writing.
  std::optional<AsyncCheckpoints> async;
  bool lead() const { return out != nullptr; }
};

// Weights that are no longer finite (an update that overflowed, fp16's working copy past
// 65504, a step taken on gradients no check saw) are never written as a checkpoint or a
// model: the run halts (exit 3) before it writes, every rank with the same message, and the
// last checkpoint written stays the run's last good state. Collective when comm is set.
void halt_if_weights_not_finite(Trainer& t, Communicator* comm, const std::string& output) {
  bool bad = false;
  // (ZeRO-3 keeps a unit's parameters released between its uses: those are the masters'.)
  for (const NamedTensor& p : t.model().parameters()) {
    bad = bad || (p.tensor.defined() && p.tensor.resident() && p.tensor.numel() > 0 &&
                  ops::has_inf_or_nan(p.tensor));
  }
  // The single device's FP32 masters too (16-bit runs; under ZeRO they are shards).
  if (!t.distributed()) {
    for (const NamedTensor& p : t.master_weights()) bad = bad || ops::has_inf_or_nan(p.tensor);
  }
  const int first = comm != nullptr ? lowest_rank_where(*comm, bad) : (bad ? 0 : -1);
  if (first < 0) return;
  throw RunHalted("step " + std::to_string(t.step()) + ": the weights" +
                  (comm != nullptr ? " of rank " + std::to_string(first) : std::string()) +
                  " are not finite, so " + output +
                  " is not written (the last checkpoint, if any, holds the last good state)");
}

// Fault injection for the kill-and-resume tests: MIXPAR_KILL_AFTER_CHECKPOINT=K makes the
// process SIGKILL itself right after the checkpoint of step K commits, the moment a real kill
// would leave the log and the checkpoints furthest apart (tests/ch08/hardening_test.cpp).
void kill_here_if_asked(std::int64_t step) {
  static const char* at = std::getenv("MIXPAR_KILL_AFTER_CHECKPOINT");
  if (at != nullptr && std::to_string(step) == at) ::raise(SIGKILL);
}

std::string ms(double seconds) { return strf("%.1f ms", seconds * 1e3); }

// A background checkpoint that committed: one line for people, one JSONL record (key
// "checkpoint", not "step": the log's steps stay one record each) with where its time went.
void report_async(RankRun& run, const std::optional<CheckpointTimes>& done) {
  if (!done) return;
  kill_here_if_asked(done->step);
  if (!run.lead()) return;
  const CheckpointTimes& c = *done;
  std::string waited;
  if (c.waited_for >= 0) {
    waited = strf("waited %s for step %lld's write, ", ms(c.wait_s).c_str(),
                  static_cast<long long>(c.waited_for));
  }
  std::fprintf(run.out,
               "checkpoint: %s (the step blocked %s: %sstaged %s in %s, committed in %s; "
               "written in the background in %s)\n",
               c.path.c_str(), ms(c.blocked_s()).c_str(), waited.c_str(),
               format_bytes(c.staged_bytes).c_str(), ms(c.staging_s).c_str(),
               ms(c.commit_s).c_str(), ms(c.write_s).c_str());
  std::fflush(run.out);
  if (!run.log) return;
  Json j = Json::object();
  j.set("checkpoint", c.step);
  j.set("path", c.path);
  j.set("blocked_ms", c.blocked_s() * 1e3);
  j.set("wait_ms", c.wait_s * 1e3);
  if (c.waited_for >= 0) j.set("waited_for", c.waited_for);
  j.set("staging_ms", c.staging_s * 1e3);
  j.set("commit_ms", c.commit_s * 1e3);
  j.set("write_ms", c.write_s * 1e3);
  j.set("staged_bytes", static_cast<std::int64_t>(c.staged_bytes));
  run.log->write(j);
}

// --checkpoint-async's save of the current step: the previous write finished first (the log
// says when the step has to wait for it), then the state staged and handed to the writer.
void save_async(RankRun& run) {
  Trainer& t = run.t;
  report_async(run, run.async->save(
                        t.step(), [&] { return t.stage_checkpoint(); },
                        [&](std::int64_t previous) {
                          std::fprintf(run.out,
                                       "checkpoint: step %lld waits for step %lld's write, "
                                       "still running in the background\n",
                                       static_cast<long long>(t.step()),
                                       static_cast<long long>(previous));
                        }));
}

// The step loop. Returns whether the last step was evaluated (the final accuracy is then known).
// Evaluation and logging are rank 0's (the replicas hold the same weights); checkpoints are
// every rank's (each writes what it holds) and the per-rank metrics a collective.
bool train_steps(RankRun& run) {
  Trainer& t = run.t;
  const TrainerConfig& c = t.config();
  EtaClock eta;
  RunWatch watch;  // the silent killers (run_watch.h), on rank 0's view of each step
  bool evaluated = false;
  while (t.step() < c.steps) {
    StepStats s = t.train_step();
    if (run.peak.flops_per_s > 0 && s.seconds > 0) s.mfu = s.flops / s.seconds / run.peak.flops_per_s;
    // Replicas that drifted apart (a nondeterministic kernel, a rank that skipped a step) train
    // N different models while the log shows rank 0's: a hash of every rank's weights, compared
    // (collective, so before the ranks part ways below). ReplicaMismatch names the ranks.
    if (t.distributed() && due(s.step, c.check_replicas_every)) t.verify_replicas();
    std::vector<TraceSpan> spans = t.take_spans();
    if (!c.trace.empty()) run.spans.insert(run.spans.end(), spans.begin(), spans.end());
    // Every rank's memory and traffic for the log (the same config on every rank: all call).
    const std::vector<RankMetrics> by_rank =
        c.log_jsonl.empty() ? std::vector<RankMetrics>{} : t.gather_rank_metrics();
    const bool validates = t.data().val_tokens != nullptr;
    evaluated = (c.builtin_data() || validates) && (due(s.step, c.eval_every) || s.step == c.steps);
    if (evaluated) t.prepare_eval_model();  // collective: a tp model is gathered on rank 0
    if (run.lead()) {
      eta.add(s.seconds);
      if (s.step % c.print_every == 0 || s.step == c.steps || s.skipped) {
        const bool fp16 = c.dtype == DType::kF16;
        std::fprintf(run.out, "%s\n",
                     progress_line(s, c.steps, fp16, eta.eta(c.steps - s.step)).c_str());
        std::fflush(run.out);
      }
      for (const std::string& w : watch.observe(s)) std::fprintf(run.out, "%s\n", w.c_str());
      std::optional<double> acc, val;
      if (evaluated && c.builtin_data()) acc = print_eval(t, run.out);
      if (evaluated && validates) val = print_validation(t, run.out);
      if (run.log) {
        run.log->write(step_json(s, memory_snapshot(current_ledger()), acc, by_rank, val));
      }
    }
    // A background write that every rank has finished commits here (collective).
    if (run.async) report_async(run, run.async->poll());
    // The step's record is written before its checkpoint commits: a kill after the commit
    // finds the record in the log (a resume from this checkpoint keeps every line up to it),
    // a kill before it resumes from the previous checkpoint and drops the lines after that
    // one (JsonlLog). Either way the log ends with every step exactly once.
    if (due(s.step, c.checkpoint_every)) {
      halt_if_weights_not_finite(t, run.comm, "the checkpoint of step " + std::to_string(s.step));
      if (run.async) {
        save_async(run);
        continue;
      }
      const std::string saved = t.save_checkpoint();
      kill_here_if_asked(s.step);
      if (run.lead()) std::fprintf(run.out, "checkpoint: %s\n", saved.c_str());
    }
  }
  return evaluated;
}

// After the last step, on every rank: the final checkpoint, unless it exists already (by the
// loop on a multiple of checkpoint_every, or, nothing run, the one this run resumed from).
// start_step: where this run began (0, or the step it resumed at).
void final_checkpoint(RankRun& run, std::int64_t start_step) {
  Trainer& t = run.t;
  const TrainerConfig& c = t.config();
  // The writer is joined: a write in flight finishes and commits before the run ends.
  if (run.async) report_async(run, run.async->finish());
  const bool saved = t.step() == start_step
                         ? c.resume
                         : c.checkpoint_every > 0 && t.step() % c.checkpoint_every == 0;
  if (c.checkpoint_dir.empty() || saved) return;
  halt_if_weights_not_finite(t, run.comm, "the final checkpoint");
  if (run.async) {
    save_async(run);
    report_async(run, run.async->finish());
    return;
  }
  const std::string path = t.save_checkpoint();
  if (run.out != nullptr) std::fprintf(run.out, "checkpoint: %s\n", path.c_str());
}

// Rank 0, after the last step: accuracy, model, sample and logits asked for.
void finish(Trainer& t, bool evaluated, std::FILE* out) {
  const TrainerConfig& c = t.config();
  if (c.builtin_data() && !evaluated) print_eval(t, out);
  if (t.data().val_tokens && !evaluated) print_validation(t, out);
  if (!c.save.empty()) {
    t.save_hf(c.save);
    std::fprintf(out, "saved: %s (Hugging Face GPT-2 directory, float32)\n", c.save.c_str());
  }
  if (c.sample > 0) print_sample(t, out);
  if (!c.dump_logits.empty()) {
    dump_logits(t.eval_model(), probe_tokens(t), c.dump_logits);
    std::fprintf(out, "logits: %s\n", c.dump_logits.c_str());
  }
}

// The pre-flight checklist (preflight.h), from the configuration alone: printed by the lead
// rank before step 1, once every input has been read (a bad one is then one line on stderr and
// nothing here), and by --dry-run, which builds no model.
void print_checklist(const TrainerConfig& c, const TrainingData& data, int ranks_here,
                     std::FILE* out) {
  const auto tokens = static_cast<std::int64_t>(data.tokens->size());
  for (const std::string& line : preflight_checklist(c, tokens, ranks_here)) {
    std::fprintf(out, "%s\n", line.c_str());
  }
  std::fprintf(out, "  ok  progress: a line every %lld steps (--print-every), and every skipped "
               "step\n", static_cast<long long>(c.print_every));
  if (const std::string w = effective_batch_warning(c); !w.empty()) {
    std::fprintf(out, "%s\n", w.c_str());
  }
}

// Before any rank builds its model: the bill checked against --device-memory and this
// machine's MemAvailable (an InputError with the bill, never std::bad_alloc mid-run); under
// --dry-run the checklist printed (out null: a silent rank) and nothing trained.
void preflight(const TrainerConfig& c, const TrainingData& data, int ranks_here, std::FILE* out) {
  check_memory(c, ranks_here, mem_available_bytes());
  if (!c.dry_run || out == nullptr) return;
  print_checklist(c, data, ranks_here, out);
  for (const std::string& line : {model_line(c), precision_line(c), optimizer_line(c)}) {
    std::fprintf(out, "%s\n", line.c_str());
  }
  std::fprintf(out, "dry run: nothing trained\n");
  std::fflush(out);
}

// The whole run of one rank (comm null: the single device). out null: a silent rank. peak:
// the lead rank's MFU denominator, measured before any rank started (gemm_peak.h).
void run_rank(const TrainerConfig& c, const TrainingData& data, Communicator* comm,
              std::FILE* out, const GemmPeak& peak, const std::function<void()>& setup_done = {},
              int ranks_here = 1) {
  Trainer t(c, data, comm);
  RankRun run{t, out, std::nullopt, {}, peak, comm, std::nullopt};
  if (c.resume) {
    t.resume();
    if (run.lead()) {
      std::fprintf(out, "resumed from %s at step %lld\n", c.checkpoint_dir.c_str(),
                   static_cast<long long>(t.step()));
    }
  }
  if (run.lead()) {
    print_checklist(c, data, ranks_here, out);
    print_preflight(t, out);
    std::fprintf(out, "MFU: %s\n", run.peak.describe().c_str());
    if (!c.log_jsonl.empty()) {
      run.log.emplace(c.log_jsonl,
                      c.resume ? std::optional<std::int64_t>(t.step()) : std::nullopt);
    }
  }
  const std::int64_t start_step = t.step();
  if (c.checkpoint_async) run.async.emplace(c.checkpoint_dir, c.checkpoint_keep, comm);
  if (setup_done) setup_done();
  bool evaluated = false;
  try {
    evaluated = train_steps(run);
    if (!c.trace.empty() && comm != nullptr) {
      const std::vector<TraceSpan> all = gather_spans(*comm, std::move(run.spans));
      if (run.lead()) {
        write_chrome_trace(c.trace, all);
        std::fprintf(out, "trace: %s (%zu spans of %d ranks; open in ui.perfetto.dev)\n",
                     c.trace.c_str(), all.size(), comm->size());
      }
    }
    final_checkpoint(run, start_step);
  } catch (...) {
    // A failed run stops its background write: the partial directory removed, and said so
    // (the error itself is the caller's to print).
    if (run.async) {
      const std::string note = run.async->abandon();
      if (run.lead() && !note.empty()) std::fprintf(out, "%s\n", note.c_str());
    }
    throw;
  }
  if (!c.save.empty()) halt_if_weights_not_finite(t, comm, "--save " + c.save);
  if (((c.builtin_data() || data.val_tokens) && !evaluated) || !c.save.empty() || c.sample > 0 ||
      !c.dump_logits.empty()) {
    t.prepare_eval_model();  // what finish() reads, gathered by every rank of a tp model
  }
  if (run.lead()) finish(t, evaluated, out);
}

// The tokens every rank reads: one global batch must fit (dp x B x T + 1).
TrainingData load_data(const TrainerConfig& c) {
  const std::int64_t batch_tokens = c.dp * c.batch * c.seq + 1;
  TrainingData d = load_training_data(c.data, c.model.vocab_size, batch_tokens);
  load_text_inputs(d, c.val_data, c.tokenizer, c.model.vocab_size, batch_tokens);
  return d;
}

// Each rank's OpenMP team: --threads, or the cores shared out among the ranks in this process.
void set_rank_threads(const TrainerConfig& c, int ranks_in_process) {
  if (c.threads > 0)
    ops::set_compute_threads(c.threads);
  else
    ops::share_cores(ranks_in_process);
}

}  // namespace

int run_training(const TrainerConfig& c, std::FILE* out) {
  if (c.backend == CommBackend::kMpi) {
    throw std::logic_error("run_training: under --backend mpi, each process calls "
                           "run_training_rank with its MPI communicator");
  }
  check_fresh_checkpoint_dir(c);
  std::optional<CheckpointDirLock> lock;
  check_lead_outputs(c, lock);
  const TrainingData data = load_data(c);
  check_prompts(c, data);
  check_step_fits_the_data(c, data);
  check_resume_checkpoint(c, data);
  preflight(c, data, c.ranks, out);
  if (c.dry_run) return 0;
  // The peak of every core the run computes on, measured before any rank thread starts (their
  // spinning would take cores from the GEMM): one device's team, or every rank's.
  const GemmPeak peak = measure_gemm_peak(
      c.distributed() ? process_compute_threads(c.ranks, c.threads) : process_compute_threads(1, 0),
      c.dtype);
  if (!c.distributed()) {
    run_rank(c, data, nullptr, out, peak);
    return 0;
  }
  LocalOptions opts;
  opts.watchdog_seconds = c.comm_timeout;
  run_local(
      c.ranks,
      [&](Communicator& comm) {
        set_rank_threads(c, comm.size());
        run_rank(c, data, &comm, comm.rank() == 0 ? out : nullptr, peak, {}, c.ranks);
      },
      opts);
  return 0;
}

bool agree_on_setup(Communicator& comm, const std::string& my_error) {
  const int first_failed = lowest_rank_where(comm, !my_error.empty());
  if (first_failed < 0) return true;
  if (comm.rank() == first_failed) {
    std::fprintf(stderr, "train_gpt: error: %s%s\n",
                 first_failed > 0 ? ("rank " + std::to_string(first_failed) + ": ").c_str() : "",
                 one_line(my_error).c_str());
    std::fflush(stderr);
  }
  comm.barrier();  // nobody leaves before the message is out
  return false;
}

int run_training_rank(const TrainerConfig& c, Communicator& comm, int ranks_on_this_machine,
                      std::FILE* out, const std::function<void()>& setup_done) {
  // The inputs every rank reads alike, checked before any collective of the run; then the
  // ranks agree that all of them can start (a file missing on one machine stops every rank).
  std::optional<TrainingData> data;
  std::optional<CheckpointDirLock> lock;  // rank 0's, for the whole run
  try {
    check_fresh_checkpoint_dir(c);
    if (comm.rank() == 0) check_lead_outputs(c, lock);
    data.emplace(load_data(c));
    check_prompts(c, *data);
    check_step_fits_the_data(c, *data);
    check_resume_checkpoint(c, *data);
    check_memory(c, ranks_on_this_machine, mem_available_bytes());
  } catch (const InputError& e) {
    agree_on_setup(comm, e.what());
    throw ReportedInputError(e.what());  // printed by agree_on_setup
  }
  if (!agree_on_setup(comm, "")) {
    throw ReportedInputError("another rank's input is bad (reported by that rank)");
  }
  // Every process parsed its own command line: the flags that must agree, compared.
  try {
    agree_on_config(comm, c, data->fingerprint);
  } catch (const InputError& e) {
    agree_on_setup(comm, e.what());  // the same message on every rank: rank 0 prints it
    throw ReportedInputError(e.what());
  }
  preflight(c, *data, ranks_on_this_machine, comm.rank() == 0 ? out : nullptr);
  if (c.dry_run) return 0;
  set_rank_threads(c, ranks_on_this_machine);
  // Rank 0's MFU: its own FLOPs (model_flops.h) over the peak of its own team's cores.
  const GemmPeak peak = comm.rank() == 0 ? measure_gemm_peak(process_compute_threads(1, 0), c.dtype)
                                         : GemmPeak{};
  run_rank(c, *data, &comm, comm.rank() == 0 ? out : nullptr, peak, setup_done,
           ranks_on_this_machine);
  return 0;
}

}  // namespace mixpar::ch08
