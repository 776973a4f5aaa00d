// mixpar-mem: prints the memory bill of one training device by category (working params,
// gradients, FP32 masters, optimizer state, activations), bytes per parameter, and whether it
// fits; --json prints the same numbers for scripts. All arithmetic is memory_calculator.h.
// Bad flags or impossible layouts: one-line error, exit code 2 (mixpar_mem_flags.cpp).
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ch03_master_weights/fp8_memory.h"
#include "ch03_master_weights/playbook_memory.h"
#include "ch03_master_weights/memory_calculator.h"
#include "ch03_master_weights/mixpar_mem_flags.h"
#include "comm/device_mesh.h"
#include "util/errors.h"
#include "util/json.h"

namespace {

using namespace mixpar;
using namespace mixpar::mem;

// Decimal GB, as the ZeRO paper and the source articles (docs/SOURCES.md) count.
constexpr double kGB = 1e9;

// 124439808 -> "124,439,808"
std::string grouped(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// Up to `decimals` decimals, trailing zeros trimmed: 16 -> "16", 0.0625 -> "0.0625".
std::string trimmed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// The layout's rank mesh (common/comm/device_mesh.h): the memory calculator's dp, tp, pp (the
// calculator has no cp), so the tool names and lists its dimensions as the trainer does.
std::vector<MeshDim> mesh_dims(const Layout& l) {
  // mixpar_mem_flags.cpp keeps each degree within 2^20.
  const auto degree = [](std::int64_t v) { return static_cast<int>(v); };
  return standard_dims(degree(l.dp), degree(l.tp), 1, degree(l.pp));
}

std::string describe_layout(const TrainingSetup& t) {
  const Layout& l = t.layout;
  std::string s = std::string(name(t.precision)) +
                  (t.precision == Precision::kFp32 ? "" : " mixed precision") + ", " +
                  (t.optimizer == Optimizer::kAdamW ? "AdamW" : "SGD with momentum") + ", ZeRO-" +
                  std::to_string(l.zero_stage) + ", " + mesh_text(mesh_dims(l));
  if (t.shape) {
    s += ", recompute " + std::string(name(l.recompute));
    if (l.sequence_parallel) s += ", sequence parallel";
  }
  if (t.offload_optimizer) s += ", optimizer offloaded to host";
  return s;
}

void print_header(const TrainingSetup& t, const MemoryBill& b) {
  std::printf("mixpar-mem: memory bill of one device\n");
  std::printf("  model        %s parameters", grouped(b.model_params).c_str());
  if (t.shape) {
    const GptShape& s = *t.shape;
    std::printf(
        " (GPT-2 layout: n_layer %lld, n_embd %lld, n_head %lld, vocab %lld, n_positions %lld)",
        static_cast<long long>(s.n_layer), static_cast<long long>(s.n_embd),
        static_cast<long long>(s.n_head), static_cast<long long>(s.vocab_size),
        static_cast<long long>(s.positions()));
  }
  std::printf("\n  layout       %s\n", describe_layout(t).c_str());
  std::printf("  this device  %s parameters", grouped(b.device_params).c_str());
  if (t.layout.pp > 1) {
    std::printf(" (pipeline stage %lld of %lld, the largest bill)", static_cast<long long>(b.stage),
                static_cast<long long>(t.layout.pp));
  }
  std::printf("\n");
  if (t.shape) {
    std::printf("  activations  %lld layers x %lld micro-batch(es) in flight x %s B/layer",
                static_cast<long long>(b.layers_on_stage),
                static_cast<long long>(b.micro_batches_in_flight),
                grouped(b.activations_per_layer).c_str());
    std::printf(" (s %lld, b %lld)\n", static_cast<long long>(t.shape->seq),
                static_cast<long long>(t.shape->micro_batch));
  }
}

void print_row(const std::string& label, double per_param, bool show_per_param,
               std::int64_t bytes) {
  const std::string pp = show_per_param ? trimmed(per_param, 5) : "-";
  std::printf("  %-34s %8s %20s %12s\n", label.c_str(), pp.c_str(), grouped(bytes).c_str(),
              trimmed(static_cast<double>(bytes) / kGB, 3).c_str());
}

// "every block", "every 2nd block", ...
std::string every(std::int64_t k) {
  if (k == 1) return "every block";
  const std::int64_t last = k % 10, tens = k % 100 / 10;
  const char* suffix = tens == 1   ? "th"
                       : last == 1 ? "st"
                       : last == 2 ? "nd"
                       : last == 3 ? "rd"
                                   : "th";
  return "every " + std::to_string(k) + suffix + " block";
}

// The MoE blocks' part of the bill (moe_memory.h), already inside the rows above.
void print_moe(const TrainingSetup& t, const MoeBill& m) {
  const MoeShape& s = t.layout.moe;
  std::printf("\n  MoE blocks   %lld on this device (%s), %lld experts of the MLP's shape, "
              "top-%lld,\n               ep %lld: %lld experts a rank, edp %lld\n",
              static_cast<long long>(m.blocks), every(s.moe_every).c_str(),
              static_cast<long long>(s.n_experts), static_cast<long long>(s.top_k),
              static_cast<long long>(s.ep), static_cast<long long>(m.experts_per_rank),
              static_cast<long long>(m.edp));
  std::printf("  rows         per block and micro-batch: %s tokens; it sends %s rows,\n"
              "               its experts run %s\n",
              grouped(m.tokens).c_str(), grouped(m.rows_sent).c_str(), grouped(m.rows_run).c_str());
  if (m.capacity >= 0) {
    std::printf("               (at most: capacity %s of a rank's tokens per expert)\n",
                grouped(m.capacity).c_str());
  } else if (s.ep > 1) {
    std::printf("               (no capacity, nothing dropped: the rows run billed at their worst "
                "case,\n               every rank's tokens choosing this rank's experts; balanced "
                "routing runs %s)\n",
                grouped(m.tokens * s.top_k).c_str());
  } else {
    std::printf("               (no capacity and ep 1: exact)\n");
  }
  const double n = static_cast<double>(m.router_params + m.expert_params);
  const auto per = [n](std::int64_t bytes) { return static_cast<double>(bytes) / n; };
  std::printf("  %-34s %8s %20s %12s\n", "of which MoE (router + experts)", "B/param", "bytes",
              "GB");
  std::printf("    elements: routers %s + experts %s\n", grouped(m.router_params).c_str(),
              grouped(m.expert_params).c_str());
  print_row("  parameters (routers in fp32)", per(m.states.parameters), true,
            m.states.parameters);
  print_row("  gradients", per(m.states.gradients), true, m.states.gradients);
  print_row("  master params (experts)", per(m.states.master_params), true,
            m.states.master_params);
  print_row("  optimizer state (experts' / edp)", per(m.states.optimizer_state), true,
            m.states.optimizer_state);
  print_row("  activations (fp32)", 0, false, m.activations);
  print_row("  all-to-all buffers (one block)", 0, false, m.dispatch());
}

void print_table(const TrainingSetup& t, const MemoryBill& b,
                 const std::vector<std::string>& notes) {
  print_header(t, b);
  const std::string w(name(t.precision));
  const double n = static_cast<double>(b.device_params);
  const auto per = [n](std::int64_t bytes) { return static_cast<double>(bytes) / n; };
  std::printf("\n  %-34s %8s %20s %12s\n", "category", "B/param", "bytes", "GB");
  print_row("parameters (" + w + " working copy)", per(b.states.parameters), true,
            b.states.parameters);
  print_row("gradients (" + w + ")", per(b.states.gradients), true, b.states.gradients);
  const std::string where = t.offload_optimizer ? ", host" : "";
  print_row(t.precision == Precision::kFp32 ? "master params (none in fp32)"
                                            : "master params (fp32" + where + ")",
            per(b.states.master_params), true, b.states.master_params);
  print_row(t.optimizer == Optimizer::kAdamW ? "optimizer state (fp32 m, v" + where + ")"
                                             : "optimizer state (fp32 momentum" + where + ")",
            per(b.states.optimizer_state), true, b.states.optimizer_state);
  print_row("model states", per(b.states.total()), true, b.states.total());
  if (b.activations) {
    print_row("activations", 0, false, *b.activations);
  } else {
    std::printf("  %-34s %8s %20s %12s\n", "activations", "-", "-", "(no shape)");
  }
  if (b.moe && b.moe->dispatch() > 0) {
    print_row("all-to-all buffers (one MoE block)", 0, false, b.moe->dispatch());
  }
  if (t.offload_optimizer) {
    print_row("device total", per(b.total_bytes), !b.activations, b.total_bytes);
    print_row("host total (masters, state)", per(b.host_bytes), true, b.host_bytes);
  } else {
    print_row("total", per(b.total_bytes), !b.activations, b.total_bytes);
  }
  if (b.moe) print_moe(t, *b.moe);
  std::printf("  (B/param: per parameter of this device's model slice)\n");
  if (b.activations) {
    std::printf(
        "  (activations: transformer layers only, Korthikanti et al. 2022; the embedding\n"
        "   output, final LayerNorm and logits are not counted)\n");
  }
  std::printf("\n");
  const double total_gb = static_cast<double>(b.total_bytes) / kGB;
  const double device_gb = t.device_memory_bytes / kGB;
  std::printf("device memory %s GB: %s (%s GB %s %s GB)\n", trimmed(device_gb, 3).c_str(),
              b.fits ? "fits" : "does NOT fit", trimmed(total_gb, 3).c_str(), b.fits ? "<=" : ">",
              trimmed(device_gb, 3).c_str());
  for (const auto& note : notes) std::printf("note: %s\n", note.c_str());
}

void print_json(const TrainingSetup& t, const MemoryBill& b,
                const std::vector<std::string>& notes, Json fp8_bytes, Json playbook) {
  const Layout& l = t.layout;
  Json j = Json::object();
  j.set("model_params", b.model_params);
  j.set("device_params", b.device_params);
  j.set("precision", name(t.precision));
  j.set("optimizer", name(t.optimizer));
  j.set("zero_stage", l.zero_stage);
  for (const MeshDim& d : shown_dims(mesh_dims(l))) j.set(d.name, d.size);
  j.set("stage", b.stage);
  if (t.shape) {
    j.set("recompute", name(l.recompute));
    j.set("sequence_parallel", l.sequence_parallel);
    j.set("layers_on_stage", b.layers_on_stage);
    j.set("micro_batches_in_flight", b.micro_batches_in_flight);
    j.set("activations_per_layer_bytes", b.activations_per_layer);
  }
  j.set("parameters_bytes", b.states.parameters);
  j.set("gradients_bytes", b.states.gradients);
  j.set("master_params_bytes", b.states.master_params);
  j.set("optimizer_state_bytes", b.states.optimizer_state);
  j.set("model_states_bytes", b.states.total());
  j.set("activations_bytes", b.activations ? Json(*b.activations) : Json());  // null: no shape
  if (b.moe) {
    const MoeBill& m = *b.moe;
    Json o = Json::object();
    o.set("n_experts", l.moe.n_experts);
    o.set("top_k", l.moe.top_k);
    o.set("moe_every", l.moe.moe_every);
    o.set("capacity_factor", l.moe.capacity_factor);
    o.set("ep", l.moe.ep);
    o.set("edp", m.edp);
    o.set("blocks", m.blocks);
    o.set("experts_per_rank", m.experts_per_rank);
    o.set("router_params", m.router_params);
    o.set("expert_params", m.expert_params);
    o.set("parameters_bytes", m.states.parameters);
    o.set("gradients_bytes", m.states.gradients);
    o.set("master_params_bytes", m.states.master_params);
    o.set("optimizer_state_bytes", m.states.optimizer_state);
    o.set("tokens", m.tokens);
    o.set("capacity", m.capacity);
    o.set("rows_sent", m.rows_sent);
    o.set("rows_run", m.rows_run);
    o.set("rows_bound", m.capacity >= 0 ? "capacity" : l.moe.ep > 1 ? "worst case" : "exact");
    o.set("activations_per_block_bytes", m.activations_per_block);
    o.set("activations_bytes", m.activations);
    o.set("dispatch_send_bytes", m.dispatch_send);
    o.set("dispatch_receive_bytes", m.dispatch_receive);
    j.set("moe", std::move(o));
  }
  j.set("total_bytes", b.total_bytes);
  if (t.offload_optimizer) {
    // total_bytes is then the device's; the masters and optimizer state are the host's.
    j.set("offload_optimizer", true);
    j.set("host_bytes", b.host_bytes);
  }
  const double dev = t.device_memory_bytes;  // whole bytes when it fits an int64 ("80GB")
  j.set("device_memory_bytes", dev < 9e18 ? Json(std::llround(dev)) : Json(dev));
  j.set("fits", b.fits);
  Json list = Json::array();
  for (const auto& n : notes) list.push_back(n);
  j.set("notes", std::move(list));
  if (!fp8_bytes.is_null()) j.set("fp8_bytes_per_param", std::move(fp8_bytes));
  if (!playbook.is_null()) j.set("fp8_playbook_accounting", std::move(playbook));
  std::printf("%s\n", j.dump(2).c_str());
}

// --precision fp8: the bf16 bill's model states and each recipe's, per parameter.
std::vector<Fp8StateBytes> fp8_rows(const MixparMemFlags& f, const MemoryBill& b) {
  const Fp8Gemms g = fp8_gemms(f.setup, b.model_params);
  std::vector<Fp8StateBytes> rows = {
      fp8_state_bytes(std::nullopt, f.setup.optimizer, b.model_params, g, f.amax_history)};
  for (fp8::Recipe r : f.fp8_recipes) {
    rows.push_back(fp8_state_bytes(r, f.setup.optimizer, b.model_params, g, f.amax_history));
  }
  return rows;
}

// Scaling state is small: three significant digits, not five decimals.
std::string opt_bytes(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", *v);
  return buf;
}

void print_fp8(const MixparMemFlags& f, const MemoryBill& b) {
  const Fp8Gemms g = fp8_gemms(f.setup, b.model_params);
  std::printf(
      "\nFP8 GEMMs (E4M3 forward; gradients E5M2, blockwise E4M3 tiles; amax history %d):\n"
      "model states in bytes per parameter of the whole model, unsharded; %s of %s parameters\n"
      "are GEMM weights cast to FP8%s\n",
      f.amax_history, grouped(g.weight_params).c_str(), grouped(b.model_params).c_str(),
      f.setup.shape ? " (4 GEMMs per layer, 12 C^2; embeddings and LM head stay bf16)"
                    : " (--params alone: all of them, an upper bound)");
  std::printf("  %-15s %6s %11s %6s %14s %8s %10s %14s %9s\n", "run", "params", "fp8 weights",
              "grads", "fp32 grad buf", "masters", "optimizer", "scaling state", "total");
  for (const Fp8StateBytes& r : fp8_rows(f, b)) {
    std::printf("  %-15s %6s %11s %6s %14s %8s %10s %14s %9s\n", r.run.c_str(),
                trimmed(r.parameters, 5).c_str(), trimmed(r.fp8_weights, 5).c_str(),
                trimmed(r.gradients, 5).c_str(), trimmed(r.fp32_grad_buffer, 5).c_str(),
                trimmed(r.master_params, 5).c_str(), trimmed(r.optimizer_state, 5).c_str(),
                opt_bytes(r.scaling_state).c_str(), trimmed(r.total(), 5).c_str());
  }
  std::printf(
      "note: FP8 adds the cast weights and the scales; the masters, gradients and optimizer\n"
      "      state stay as chapter 3 keeps them. DeepSeek-V3 also keeps AdamW's m and v in BF16\n"
      "      (%s B/param less), a change of the optimizer, not of the GEMM.\n",
      trimmed(state_bytes_per_param(Precision::kBf16, f.setup.optimizer).optimizer_state / 2.0, 5)
          .c_str());
  if (!g.count) {
    std::printf("note: the scaling state ('-') counts GEMMs: it needs a shape (--n-layer ...)\n");
  }
}

// "<bytes> <format>" for one component of the Playbook's table; "n/a" when not kept.
std::string cell(double bytes, const std::string& format) {
  if (bytes == 0) return "n/a";
  return trimmed(bytes, 5) + " " + format;
}

std::string optimizer_format(double bytes) {  // mixpar's moments are FP32: 1 or 2 of them
  return bytes == 8 ? "FP32+FP32" : "FP32";
}

// The Playbook's FP8 table (playbook_memory.h) and this run's bills in its columns.
void print_playbook(const MixparMemFlags& f, const MemoryBill& b) {
  std::printf(
      "\nPlaybook accounting (The Ultra-Scale Playbook, FP8 pretraining): bytes per parameter\n"
      "of master weights, accumulated gradients, model weights, gradients, optimizer states in\n"
      "the formats each row names (FP8 = 1 B); mixpar's rows are this run's bills, 'scales' what\n"
      "the Playbook's columns do not hold ('-': unknown without a shape):\n");
  const char* fmt = "  %-41s %-8s %-8s %-17s %-7s %-15s %-8s %8s\n";
  std::printf(fmt, "row", "masters", "grad acc", "weights", "grads", "optimizer", "scales",
              "total");
  for (const PlaybookRow& r : playbook_fp8_rows()) {
    const ComponentBytes c = component_bytes(r);
    const std::string opt =
        r.optimizer_first ? playbook_format_name(r.optimizer_first) + "+" +
                                playbook_format_name(r.optimizer_second)
                          : "n/a";
    std::printf(fmt, r.name.c_str(),
                cell(c.master_weights, playbook_format_name(r.master_weights)).c_str(),
                cell(c.accumulated_gradients, playbook_format_name(r.accumulated_gradients)).c_str(),
                cell(c.model_weights, playbook_format_name(r.model_weights)).c_str(),
                cell(c.gradients, playbook_format_name(r.gradients)).c_str(),
                cell(c.optimizer, opt).c_str(), "-", trimmed(c.total(), 5).c_str());
  }
  for (const Fp8StateBytes& s : fp8_rows(f, b)) {
    const ComponentBytes c = component_bytes(s);
    std::printf(fmt, ("mixpar " + s.run).c_str(), cell(c.master_weights, "FP32").c_str(),
                cell(c.accumulated_gradients, "FP32").c_str(),
                cell(c.model_weights, s.fp8_weights > 0 ? "BF16+FP8" : "BF16").c_str(),
                cell(c.gradients, "BF16").c_str(),
                cell(c.optimizer, optimizer_format(c.optimizer)).c_str(),
                opt_bytes(s.scaling_state).c_str(),
                trimmed(c.total(), 5).c_str());
  }
  const ComponentBytes base = component_bytes(playbook_fp8_rows().front());
  const ComponentBytes ours = component_bytes(fp8_rows(f, b).front());
  const bool same = base.master_weights == ours.master_weights &&
                    base.accumulated_gradients == ours.accumulated_gradients &&
                    base.model_weights == ours.model_weights && base.gradients == ours.gradients &&
                    base.optimizer == ours.optimizer;
  std::printf(
      "note: mixpar's bf16 row %s;\n"
      "      its FP8 rows keep all of it and add the FP8 copy of the GEMM weights and the scales.\n"
      "      The Playbook's Transformer Engine row keeps one FP32 weight copy and FP32 gradients\n"
      "      (no BF16 copy, no separate masters, no FP8 weight cache); its DeepSeek-V3 row\n"
      "      counts the weights as FP8 alone and AdamW's moments in BF16.\n",
      same ? "is the Playbook's baseline, component by component"
           : "differs from the Playbook's baseline (its rows assume AdamW)");
}

Json playbook_json(const MixparMemFlags& f, const MemoryBill& b) {
  auto row = [](const std::string& name, const ComponentBytes& c) {
    Json j = Json::object();
    j.set("row", name);
    j.set("master_weights", c.master_weights);
    j.set("accumulated_gradients", c.accumulated_gradients);
    j.set("model_weights", c.model_weights);
    j.set("gradients", c.gradients);
    j.set("optimizer_states", c.optimizer);
    j.set("scales", c.extra);
    j.set("total", c.total());
    return j;
  };
  Json list = Json::array();
  for (const PlaybookRow& r : playbook_fp8_rows()) list.push_back(row(r.name, component_bytes(r)));
  for (const Fp8StateBytes& s : fp8_rows(f, b)) {
    list.push_back(row("mixpar " + s.run, component_bytes(s)));
  }
  return list;
}

Json fp8_json(const MixparMemFlags& f, const MemoryBill& b) {
  Json list = Json::array();
  for (const Fp8StateBytes& r : fp8_rows(f, b)) {
    Json j = Json::object();
    j.set("run", r.run);
    j.set("parameters", r.parameters);
    j.set("fp8_weights", r.fp8_weights);
    j.set("gradients", r.gradients);
    j.set("fp32_grad_buffer", r.fp32_grad_buffer);
    j.set("master_params", r.master_params);
    j.set("optimizer_state", r.optimizer_state);
    j.set("scaling_state", r.scaling_state ? Json(*r.scaling_state) : Json());
    j.set("total", r.total());
    list.push_back(std::move(j));
  }
  return list;
}

int run(int argc, char** argv) {
  const MixparMemFlags flags = parse_mixpar_mem_flags(argc, argv);
  const TrainingSetup& setup = flags.setup;
  const MemoryBill bill = compute_bill(setup);
  const std::vector<std::string> notes = bill_notes(setup, bill);
  if (flags.json) {
    print_json(setup, bill, notes, flags.fp8 ? fp8_json(flags, bill) : Json(),
               flags.fp8 ? playbook_json(flags, bill) : Json());
  } else {
    print_table(setup, bill, notes);
    if (flags.fp8) {
      print_fp8(flags, bill);
      print_playbook(flags, bill);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
