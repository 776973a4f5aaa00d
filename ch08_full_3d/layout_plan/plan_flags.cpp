#include "plan_flags.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "io/gpt_config.h"
#include "util/cli.h"
#include "util/errors.h"
#include "util/json_file.h"

namespace mixpar::plan {

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

ArgParser make_args() {
  ArgParser a("mixpar-plan",
              "Ranks dp x tp x cp x pp x ZeRO layouts of a GPT-2-shaped model on a cluster by "
              "predicted step time,\nafter dropping those that do not fit memory (chapter 3's "
              "bill) or that train_gpt would refuse.\n--calibrate measures this machine and "
              "writes the cluster file of --cluster this-machine.");
  a.option("model", "", "preset: gpt2-124m|gpt2-350m|gpt2-1.5b|llama3-8b|llama3-70b|llama3-405b "
                        "(8b, 70b, 405b: GPT-2 shapes of Llama 3's parameter counts)")
      .option("config", "", "a Hugging Face GPT-2 config.json (or its directory)")
      .option("n-layer", "", "model shape: blocks")
      .option("n-embd", "", "model shape: width C")
      .option("n-head", "", "model shape: attention heads")
      .option("vocab-size", "50257", "model shape: vocabulary (with --n-layer ...)")
      .option("seq", "", "sequence length T (required)")
      .option("global-batch", "", "sequences per optimizer step (required)")
      .option("cluster", "h100-80gb-nvlink-ib400",
              "preset: h100-80gb-nvlink-ib400|a100-80gb|this-machine (--calibration's file)")
      .option("devices", "", "devices in all (default: the preset's one node)")
      .option("devices-per-node", "", "devices per node")
      .option("memory-gb", "", "memory per device, GB (1e9 bytes)")
      .option("peak-tflops", "", "dense peak per device, TFLOP/s (16-bit)")
      .option("intra-gbps", "", "intra-node bandwidth per device and direction, GB/s")
      .option("inter-gbps", "", "inter-node bandwidth per device and direction, GB/s")
      .option("intra-latency-us", "", "intra-node latency per message, microseconds")
      .option("inter-latency-us", "", "inter-node latency per message, microseconds")
      .option("dtypes", "bf16", "working dtypes to consider: bf16,fp16,fp32")
      .option("zero-stages", "0,1,2,3", "ZeRO stages to consider")
      .option("recompute", "none,selective,full", "recompute modes to consider")
      .option("micro-batch-sizes", "1,2,4,8,16,32", "micro-batch sizes b to consider")
      .option("schedules", "1f1b,interleaved,zb-h1",
              "pipeline schedules to consider (chapter 7's: afab|1f1b|interleaved|zb-h1|zb-v|dualpipev)")
      .option("virtual-stages", "2,4", "interleaved's chunks per rank v to consider")
      .option("dp", "", "data-parallel degrees to keep, e.g. 8 or 4,8 (default: all)")
      .option("tp", "", "tensor-parallel degrees to keep")
      .option("cp", "", "context-parallel degrees to keep")
      .option("pp", "", "pipeline degrees to keep")
      .flag("no-cp", "do not consider context parallelism")
      .flag("no-pp", "do not consider pipeline parallelism")
      .option("top", "10", "layouts to print")
      .option("json", "", "write every ranked layout to FILE")
      .flag("overwrite", "replace an existing --json or --calibration file")
      .flag("calibrate", "measure this machine's GEMM and all-reduce rates, write --calibration")
      .option("calibration", "this-machine.json", "the cluster file of --cluster this-machine")
      .option("cores", "", "--calibrate: the cores the ranks share (default: all)");
  return a;
}

double positive_double(const ArgParser& a, const std::string& flag) {
  const double v = a.get_double(flag);
  if (!(v > 0) || !std::isfinite(v)) {
    throw InputError("--" + flag + " must be a positive finite number, got " + a.get(flag));
  }
  return v;
}

GptConfig shape_from_flags(const ArgParser& a, std::int64_t seq) {
  for (const char* f : {"n-layer", "n-embd", "n-head"}) {
    if (!a.given(f)) {
      throw InputError(std::string("--") + f + " is needed with the shape flags (or give "
                       "--model or --config)");
    }
  }
  GptConfig g{a.get_int("n-layer", 1, 1 << 20), a.get_int("n-head", 1, 1 << 20),
              a.get_int("n-embd", 1, 1 << 24), seq, a.get_int("vocab-size", 1, 1 << 24)};
  g.validate();
  return g;
}

PlanModel read_model(const ArgParser& a, std::int64_t seq) {
  const int given = (a.given("model") ? 1 : 0) + (a.given("config") ? 1 : 0) +
                    (a.given("n-layer") ? 1 : 0);
  if (given != 1) {
    throw InputError("give the model once: --model NAME, --config FILE or --n-layer --n-embd "
                     "--n-head [--vocab-size]");
  }
  if (a.given("model")) return model_preset(a.get("model"), seq);
  if (a.given("config")) {
    const HfGpt2Config h = read_gpt2_config(a.get("config"));
    if (seq > h.n_positions) {
      throw InputError("--seq " + std::to_string(seq) + " is longer than the config's "
                       "n_positions " + std::to_string(h.n_positions));
    }
    return PlanModel{.name = a.get("config"),
                     .shape = GptConfig{h.n_layer, h.n_head, h.n_embd, h.n_positions, h.vocab_size},
                     .note = ""};
  }
  return PlanModel{.name = "GPT-2 shape", .shape = shape_from_flags(a, seq), .note = ""};
}

void override_cluster(const ArgParser& a, Cluster& c) {
  if (a.given("devices")) c.devices = a.get_int("devices", -(1 << 30), 1 << 30);
  if (a.given("devices-per-node")) c.devices_per_node = a.get_int("devices-per-node", -(1 << 30), 1 << 30);
  if (a.given("memory-gb")) c.memory_bytes = positive_double(a, "memory-gb") * 1e9;
  if (a.given("peak-tflops")) c.peak_flops = positive_double(a, "peak-tflops") * 1e12;
  if (a.given("intra-gbps")) c.intra.bandwidth = positive_double(a, "intra-gbps") * 1e9;
  if (a.given("inter-gbps")) c.inter.bandwidth = positive_double(a, "inter-gbps") * 1e9;
  if (a.given("intra-latency-us")) c.intra.latency = a.get_double("intra-latency-us") * 1e-6;
  if (a.given("inter-latency-us")) c.inter.latency = a.get_double("inter-latency-us") * 1e-6;
  validate(c);
}

}  // namespace

PlanFlags parse_plan_flags(int argc, char** argv) {
  ArgParser a = make_args();
  a.parse(argc, argv);
  PlanFlags f;
  const bool overwrite = a.get_flag("overwrite");
  f.calibrate = a.get_flag("calibrate");
  f.calibration_path = a.get("calibration");
  if (f.calibrate) {
    f.calibration_path = checked_output_path("--calibration", f.calibration_path, overwrite);
    f.cluster.devices = a.given("devices") ? a.get_int("devices", 2, 1024) : 8;
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    f.cores = a.given("cores") ? static_cast<int>(a.get_int("cores", 1, 4096)) : std::max(1, hw);
    return f;
  }
  if (!a.given("seq")) throw InputError("--seq is needed (the sequence length)");
  if (!a.given("global-batch")) throw InputError("--global-batch is needed (sequences per step)");
  f.space.seq = a.get_int("seq", 1, 1 << 24);
  f.space.global_batch = a.get_int("global-batch", 1, std::int64_t{1} << 40);
  f.model = read_model(a, f.space.seq);
  f.cluster = cluster_preset(a.get("cluster"), f.calibration_path);
  override_cluster(a, f.cluster);
  f.space.precisions.clear();
  for (const std::string& d : split(a.get("dtypes"))) f.space.precisions.push_back(mem::parse_precision(d));
  f.space.zero_stages.clear();
  for (const std::string& z : split(a.get("zero-stages"))) {
    const std::int64_t v = parse_int("--zero-stages", z);
    if (v < 0 || v > 3) throw InputError("--zero-stages: " + z + " is not a ZeRO stage: 0-3");
    f.space.zero_stages.push_back(static_cast<int>(v));
  }
  f.space.recomputes.clear();
  for (const std::string& r : split(a.get("recompute"))) f.space.recomputes.push_back(mem::parse_recompute(r));
  f.space.micro_batch_sizes.clear();
  for (const std::string& b : split(a.get("micro-batch-sizes"))) {
    const std::int64_t v = parse_int("--micro-batch-sizes", b);
    if (v < 1) throw InputError("--micro-batch-sizes: " + b + " is not a positive size");
    f.space.micro_batch_sizes.push_back(v);
  }
  if (f.space.precisions.empty() || f.space.zero_stages.empty() || f.space.recomputes.empty() ||
      f.space.micro_batch_sizes.empty()) {
    throw InputError("--dtypes, --zero-stages, --recompute and --micro-batch-sizes each need a value");
  }
  f.space.schedules.clear();
  for (const std::string& k : split(a.get("schedules"))) f.space.schedules.push_back(ch07::parse_schedule(k));
  f.space.virtual_stages.clear();
  for (const std::string& v : split(a.get("virtual-stages"))) {
    f.space.virtual_stages.push_back(static_cast<int>(parse_int("--virtual-stages", v, 2, 1024)));
  }
  if (f.space.schedules.empty()) throw InputError("--schedules needs a value");
  const auto degrees = [&](const char* flag) {
    std::vector<int> out;
    if (!a.given(flag)) return out;
    for (const std::string& d : split(a.get(flag))) {
      out.push_back(static_cast<int>(parse_int(std::string("--") + flag, d, 1, 1 << 30)));
    }
    return out;
  };
  f.space.dp_degrees = degrees("dp");
  f.space.tp_degrees = degrees("tp");
  f.space.cp_degrees = degrees("cp");
  f.space.pp_degrees = degrees("pp");
  f.space.context_parallel = !a.get_flag("no-cp");
  f.space.pipeline = !a.get_flag("no-pp");
  f.top = static_cast<int>(a.get_int("top", 1, 1000000));
  refuse_overwrite_without_output(overwrite, a.given("json"), "--json or --calibrate");
  if (a.given("json")) f.json_path = checked_output_path("--json", a.get("json"), overwrite);
  return f;
}

}  // namespace mixpar::plan
