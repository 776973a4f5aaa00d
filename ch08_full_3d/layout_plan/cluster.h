// A cluster as the layout advisor (mixpar-plan) sees it: devices in nodes, each device's memory
// and peak, a GEMM efficiency curve, and one alpha-beta link inside a node and one across
// nodes. Presets carry datasheet numbers (docs/SOURCES.md, "Cluster presets"); `this-machine`
// is the file --calibrate writes (calibrate.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/json.h"

namespace mixpar::plan {

// Time of a message of n bytes on a link: alpha + n / bandwidth (Hockney's alpha-beta model,
// docs/REFERENCE.md, "Collectives").
struct Link {
  double bandwidth = 0;  // bytes/s, one direction, per device
  double latency = 0;    // seconds per message (alpha)
  double time(double bytes) const { return latency + bytes / bandwidth; }
};

struct Cluster {
  std::string name;
  std::int64_t devices = 0, devices_per_node = 0;
  double memory_bytes = 0;  // per device
  double peak_flops = 0;    // per device, dense, the working dtype (bf16/fp16; fp32 below)
  // FP32 GEMMs run at this share of the 16-bit peak (H100/A100: TF32 tensor cores are half
  // the bf16 rate; 1 on a CPU, whose FP32 FMA units the 16-bit runs widen to).
  double fp32_peak_ratio = 0.5;
  // GEMM efficiency curve: a GEMM of the FLOPs of an n x n x n one runs at
  // peak x eff_max x n / (n + half_size). Half of eff_max at n = half_size.
  double gemm_eff_max = 0.75, gemm_half_size = 256;
  // Device memory bandwidth, bytes/s (shared: the machine's, all cores streaming): what the
  // optimizer step, memory-bound, runs at.
  double memory_bandwidth = 0;
  Link intra, inter;
  // 0: every device computes on its own. k > 0: all devices are threads of one machine that
  // shares k cores (this-machine): the ranks' compute adds up (calibrate.h, step_time_model.h).
  int shared_cores = 0;

  std::int64_t nodes() const { return devices / devices_per_node; }
  // The efficiency of a GEMM of the size of an n x n x n one.
  double gemm_efficiency(double n) const { return gemm_eff_max * n / (n + gemm_half_size); }
};

// InputError naming the first impossible value (no devices, devices not a multiple of the
// node size, a bandwidth, latency, peak or memory that is not a positive finite number).
void validate(const Cluster& c);

// The names of the presets: "h100-80gb-nvlink-ib400", "a100-80gb", "this-machine".
std::vector<std::string> cluster_preset_names();
// A preset by name; "this-machine" reads `this_machine_file` (written by --calibrate). An
// unknown name is an InputError listing the choices.
Cluster cluster_preset(const std::string& name, const std::string& this_machine_file);

Json to_json(const Cluster& c);
Cluster cluster_from_json(const Json& j, const std::string& source);

}  // namespace mixpar::plan
