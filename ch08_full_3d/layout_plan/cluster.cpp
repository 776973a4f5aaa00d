#include "cluster.h"

#include <cmath>
#include <filesystem>

#include "io/atomic_file.h"
#include "util/errors.h"

namespace mixpar::plan {

namespace {

bool positive(double v) { return std::isfinite(v) && v > 0; }

void need_positive(double v, const std::string& what) {
  if (!positive(v)) {
    throw InputError("cluster: " + what + " must be a positive finite number, got " +
                     std::to_string(v));
  }
}

}  // namespace

void validate(const Cluster& c) {
  if (c.devices < 1) {
    throw InputError("cluster: " + std::to_string(c.devices) + " devices: a cluster needs at "
                     "least one device");
  }
  if (c.devices_per_node < 1) {
    throw InputError("cluster: " + std::to_string(c.devices_per_node) +
                     " devices per node: a node holds at least one device");
  }
  if (c.devices % c.devices_per_node != 0 && c.devices > c.devices_per_node) {
    throw InputError("cluster: " + std::to_string(c.devices) +
                     " devices is not a multiple of the node size " +
                     std::to_string(c.devices_per_node) + " (whole nodes only)");
  }
  need_positive(c.memory_bytes, "memory per device");
  need_positive(c.peak_flops, "peak FLOP/s");
  need_positive(c.fp32_peak_ratio, "the FP32 peak ratio");
  need_positive(c.gemm_eff_max, "the GEMM efficiency");
  if (c.gemm_eff_max > 1) throw InputError("cluster: a GEMM efficiency above 1 is no efficiency");
  need_positive(c.gemm_half_size, "the GEMM half-efficiency size");
  need_positive(c.memory_bandwidth, "memory bandwidth");
  need_positive(c.intra.bandwidth, "intra-node bandwidth");
  need_positive(c.inter.bandwidth, "inter-node bandwidth");
  if (!std::isfinite(c.intra.latency) || c.intra.latency < 0 || !std::isfinite(c.inter.latency) ||
      c.inter.latency < 0) {
    throw InputError("cluster: a latency must be a finite number >= 0");
  }
  if (c.shared_cores < 0) throw InputError("cluster: shared cores must be >= 0");
}

std::vector<std::string> cluster_preset_names() {
  return {"h100-80gb-nvlink-ib400", "a100-80gb", "this-machine"};
}

Cluster cluster_preset(const std::string& name, const std::string& this_machine_file) {
  // Datasheet numbers: docs/SOURCES.md, "Cluster presets". Latencies are the usual orders of
  // magnitude of one NCCL message (a few microseconds inside a node, more across), stated as
  // defaults, not measured.
  if (name == "h100-80gb-nvlink-ib400") {
    Cluster c;
    c.name = name;
    c.devices = c.devices_per_node = 8;
    c.memory_bytes = 80e9;
    c.peak_flops = 989e12;
    c.memory_bandwidth = 3.35e12;  // HBM3
    c.intra = {.bandwidth = 450e9, .latency = 5e-6};  // NVLink 4: 900 GB/s bidirectional
    c.inter = {.bandwidth = 50e9, .latency = 10e-6};  // ConnectX-7 400 Gb/s per GPU
    return c;
  }
  if (name == "a100-80gb") {
    Cluster c;
    c.name = name;
    c.devices = c.devices_per_node = 8;
    c.memory_bytes = 80e9;
    c.peak_flops = 312e12;
    c.memory_bandwidth = 2.039e12;  // HBM2e, the 80 GB part
    c.intra = {.bandwidth = 300e9, .latency = 5e-6};  // NVLink 3: 600 GB/s bidirectional
    c.inter = {.bandwidth = 25e9, .latency = 10e-6};  // HDR InfiniBand 200 Gb/s per GPU
    return c;
  }
  if (name == "this-machine") {
    if (!std::filesystem::exists(this_machine_file)) {
      throw InputError("--cluster this-machine: no calibration file '" + this_machine_file +
                       "' (run mixpar-plan --calibrate first, or give --cluster-file)");
    }
    return cluster_from_json(Json::parse(read_file(this_machine_file), this_machine_file),
                             this_machine_file);
  }
  std::string names;
  for (const std::string& n : cluster_preset_names()) names += (names.empty() ? "" : "|") + n;
  throw InputError("--cluster: '" + name + "' is not one of " + names);
}

Json to_json(const Cluster& c) {
  Json j = Json::object();
  j.set("name", c.name);
  j.set("devices", c.devices);
  j.set("devices_per_node", c.devices_per_node);
  j.set("memory_bytes", c.memory_bytes);
  j.set("peak_flops", c.peak_flops);
  j.set("fp32_peak_ratio", c.fp32_peak_ratio);
  j.set("gemm_eff_max", c.gemm_eff_max);
  j.set("gemm_half_size", c.gemm_half_size);
  j.set("memory_bandwidth", c.memory_bandwidth);
  j.set("intra_bandwidth", c.intra.bandwidth);
  j.set("intra_latency", c.intra.latency);
  j.set("inter_bandwidth", c.inter.bandwidth);
  j.set("inter_latency", c.inter.latency);
  j.set("shared_cores", c.shared_cores);
  return j;
}

Cluster cluster_from_json(const Json& j, const std::string& source) {
  try {
    Cluster c;
    c.name = j.at("name").as_string();
    c.devices = j.at("devices").as_int();
    c.devices_per_node = j.at("devices_per_node").as_int();
    c.memory_bytes = j.at("memory_bytes").as_double();
    c.peak_flops = j.at("peak_flops").as_double();
    c.fp32_peak_ratio = j.at("fp32_peak_ratio").as_double();
    c.gemm_eff_max = j.at("gemm_eff_max").as_double();
    c.gemm_half_size = j.at("gemm_half_size").as_double();
    c.memory_bandwidth = j.at("memory_bandwidth").as_double();
    c.intra = {j.at("intra_bandwidth").as_double(), j.at("intra_latency").as_double()};
    c.inter = {j.at("inter_bandwidth").as_double(), j.at("inter_latency").as_double()};
    c.shared_cores = static_cast<int>(j.at("shared_cores").as_int());
    validate(c);
    return c;
  } catch (const InputError& e) {
    throw InputError(source + ": " + e.what());
  }
}

}  // namespace mixpar::plan
