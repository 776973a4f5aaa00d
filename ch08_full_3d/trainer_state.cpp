// A training checkpoint, the Trainer's half: what goes into the directory and how it comes
// back. model.safetensors + config.json are a Hugging Face directory of the FP32 masters (so a
// checkpoint is also a loadable model); optimizer.safetensors holds AdamW's m and v;
// trainer_state.json the step, the optimizer's t, the scaler, the loader and the run identity.
#include <cstdio>
#include <filesystem>

#include "checkpoint.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/gpt_hf.h"
#include "trainer.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFormat = "mixpar-train-state";
constexpr std::int64_t kStateVersion = 1;

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The saved run identity against this run's, naming the first field that differs.
void check_identity(const Json& saved, const Json& now, const std::string& dir) {
  for (const auto& [key, value] : now.as_object()) {
    const Json* s = saved.find(key);
    if (!s || !(*s == value)) {
      throw InputError(dir + ": checkpoint was written by a run with " + key + " = " +
                       (s ? s->dump() : "(absent)") + ", this run has " + value.dump());
    }
  }
}

Json read_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kStateFile).string();
  Json st = Json::parse(read_file(path), path);
  if (!st.is_object() || !st.contains("format") || st.at("format") != Json(kStateFormat) ||
      !st.contains("version") || st.at("version") != Json(kStateVersion)) {
    throw InputError(path + ": not a mixpar training state (format " + kStateFormat + " version " +
                     std::to_string(kStateVersion) + ")");
  }
  return st;
}

// dst (FP32 [shape]) <- the tensor `name` of the optimizer file, which must match exactly.
void load_moment(const SafetensorsReader& r, const std::string& name, const Tensor& dst) {
  const SafetensorsEntry* e = r.find(name);
  if (!e) throw InputError(r.path() + ": missing tensor " + name);
  if (e->dtype != DType::kF32 || e->shape != dst.shape()) {
    throw InputError(r.path() + ": " + name + " is " + e->dtype_name + " " + shape_str(e->shape) +
                     ", expected F32 " + shape_str(dst.shape()));
  }
  Tensor d = dst;
  d.copy_from(r.load(name, MemCategory::kOther));
}

}  // namespace

void Trainer::write_checkpoint_files(const std::string& dir) const {
  save_gpt_hf(dir, config_.model, master_weights());
  const AdamW& adam = *optimizer_.adamw();
  const auto entries = model_.registry().entries();
  NamedTensors moments;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    moments.emplace_back("exp_avg." + entries[i].name, adam.exp_avg(i));
    moments.emplace_back("exp_avg_sq." + entries[i].name, adam.exp_avg_sq(i));
  }
  write_safetensors((fs::path(dir) / kOptimizerFile).string(), moments);
  Json st = Json::object();
  st.set("format", kStateFormat);
  st.set("version", kStateVersion);
  st.set("step", step_);
  st.set("optimizer_steps", adam.step_count());
  st.set("loader", loader_state_to_json(loader_.state()));
  st.set("scaler", ch02::state_to_json(optimizer_.scaler().state()));
  st.set("data_fingerprint", hex64(data_.fingerprint));
  st.set("run", run_identity(config_));
  st.set("config", to_json(config_));
  write_file_atomic((fs::path(dir) / kStateFile).string(), st.dump(2) + "\n");
}

std::string Trainer::save_checkpoint() {
  return ch08::save_checkpoint(
      config_.checkpoint_dir, step_,
      [this](const std::string& dir) { write_checkpoint_files(dir); }, config_.checkpoint_keep);
}

void Trainer::resume() {
  const std::string dir = latest_checkpoint(config_.checkpoint_dir);  // verified manifest
  const Json st = read_state(dir);
  check_identity(st.at("run"), run_identity(config_), dir);
  if (st.at("data_fingerprint").as_string() != hex64(data_.fingerprint)) {
    throw InputError(dir + ": checkpoint was trained on other data (token fingerprint " +
                     st.at("data_fingerprint").as_string() + ", this data " +
                     hex64(data_.fingerprint) + ")");
  }
  load_gpt_hf_into(dir, config_.model, master_weights());
  const SafetensorsReader r((fs::path(dir) / kOptimizerFile).string());
  const AdamW& adam = *optimizer_.adamw();
  const auto entries = model_.registry().entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    load_moment(r, "exp_avg." + entries[i].name, adam.exp_avg(i));
    load_moment(r, "exp_avg_sq." + entries[i].name, adam.exp_avg_sq(i));
  }
  optimizer_.adamw()->set_step_count(st.at("optimizer_steps").as_int());
  optimizer_.scaler().load_state(ch02::state_from_json(st.at("scaler")));
  loader_.restore(loader_state_from_json(st.at("loader")));
  step_ = st.at("step").as_int();
  recast_working_copy();
  if (ddp_) ddp_->verify_replicas();
}

}  // namespace mixpar::ch08
