// A training checkpoint, the Trainer's half: what goes into the directory and how it comes
// back. Every rank writes the shards it holds; one replica (dp rank 0) of each (tp, pp) place
// writes that place's parameters and moments, since the dp replicas hold the same ones. On a
// layout of one tp and one pp place those are model.safetensors + config.json, a Hugging Face
// directory of the FP32 masters (so a checkpoint is also a loadable model), and
// optimizer.safetensors with AdamW's m and v; on other layouts model-tpT-ppP.safetensors and
// optimizer-tpT-ppP.safetensors. Rank 0 writes trainer_state.json: the step, the optimizer's
// t, the scaler, the loader and the run identity, which every rank shares (the scaler's
// decisions and the loader's steps are agreed each step; the RNG is counter-based: seed and
// step), and the layout with the shard files each place wrote.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "checkpoint.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/gpt_hf.h"
#include "run_checks.h"
#include "trainer.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFormat = "mixpar-train-state";
// 2: the layout and its shards. 1 (no layout): a dp x 1 x 1 run, read as such.
constexpr std::int64_t kStateVersion = 2;

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
  const bool known = st.is_object() && st.contains("format") &&
                     st.at("format") == Json(kStateFormat) && st.contains("version") &&
                     (st.at("version") == Json(kStateVersion) || st.at("version") == Json(1));
  if (!known) {
    throw InputError(path + ": not a mixpar training state (format " + kStateFormat + " version " +
                     std::to_string(kStateVersion) + ")");
  }
  return st;
}

// The grid a checkpoint was written on, as its state names it.
struct Layout {
  std::int64_t dp = 1, tp = 1, pp = 1;
  bool operator==(const Layout&) const = default;
  std::string str() const {
    return "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " +
           std::to_string(pp);
  }
};

Json layout_json(const Layout& l) {
  Json j = Json::object();
  j.set("dp", l.dp);
  j.set("tp", l.tp);
  j.set("pp", l.pp);
  return j;
}

Layout layout_of(const Json& state, const std::string& path) {
  Layout l;
  if (!state.contains("layout")) {  // version 1: data parallel only
    l.dp = state.at("run").at("dp").as_int();
    return l;
  }
  const Json& j = state.at("layout");
  l.dp = j.at("dp").as_int();
  l.tp = j.at("tp").as_int();
  l.pp = j.at("pp").as_int();
  if (l.dp < 1 || l.tp < 1 || l.pp < 1) throw InputError(path + ": layout " + l.str() + " is not a grid");
  return l;
}

// The files of the (tp, pp) place's parameters and moments.
std::string model_file(const Layout& l, const GridCoord& at) {
  if (l.tp == 1 && l.pp == 1) return "model.safetensors";  // with config.json: a HF directory
  return "model-tp" + std::to_string(at.tp) + "-pp" + std::to_string(at.pp) + ".safetensors";
}
std::string optimizer_file(const Layout& l, const GridCoord& at) {
  if (l.tp == 1 && l.pp == 1) return kOptimizerFile;
  return "optimizer-tp" + std::to_string(at.tp) + "-pp" + std::to_string(at.pp) + ".safetensors";
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

Json schedule_json(const LrSchedule& s) {
  Json j = Json::object();
  j.set("kind", std::string(lr_schedule_name(s.kind)));
  j.set("lr", s.lr);
  j.set("min_lr", s.min_lr);
  j.set("warmup_steps", s.warmup_steps);
  j.set("total_steps", s.total_steps);
  return j;
}

// The learning-rate schedule the checkpoint's run was following: its own record, or (states
// written before it was recorded) the config's flags, whose --steps is the schedule's total.
LrSchedule saved_schedule(const Json& st, const LrSchedule& now) {
  LrSchedule s = now;
  if (const Json* j = st.find("lr_schedule")) {
    s.kind = parse_lr_schedule(j->at("kind").as_string());
    s.lr = j->at("lr").as_double();
    s.min_lr = j->at("min_lr").as_double();
    s.warmup_steps = j->at("warmup_steps").as_int();
    s.total_steps = j->at("total_steps").as_int();
    return s;
  }
  const Json* cfg = st.find("config");
  if (cfg == nullptr) return s;
  if (const Json* v = cfg->find("lr_schedule")) s.kind = parse_lr_schedule(v->as_string());
  if (const Json* v = cfg->find("lr")) s.lr = v->as_double();
  if (const Json* v = cfg->find("min_lr")) s.min_lr = v->as_double();
  if (const Json* v = cfg->find("warmup")) s.warmup_steps = v->as_int();
  if (const Json* v = cfg->find("steps")) s.total_steps = v->as_int();
  return s;
}

// Resuming must not reshape the learning-rate schedule: from the checkpoint's step on, this
// run's rates are the saved run's (which, past its last step, stays at its final rate).
// Extending a constant schedule changes nothing and passes; anything else names its flags.
void check_schedule(const Json& st, const TrainerConfig& c) {
  const LrSchedule& now = c.schedule;
  const LrSchedule old = saved_schedule(st, now);
  const std::int64_t from = st.at("step").as_int();
  const std::int64_t probe_end = std::min(now.total_steps, from + 1000000);
  std::int64_t differs = -1;
  for (std::int64_t s = from; s < probe_end && differs < 0; ++s) {
    if (old.at(s) != now.at(s)) differs = s;
  }
  const std::int64_t last = now.total_steps - 1;
  if (differs < 0 && last >= from && old.at(last) != now.at(last)) differs = last;
  if (differs < 0) return;
  std::string flags;
  auto note = [&](const char* flag, const std::string& was, const std::string& is) {
    if (was == is) return;
    flags += (flags.empty() ? "" : ", ") + std::string(flag) + " " + is + " (the run's: " + was +
             ")";
  };
  auto g = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  note("--steps", std::to_string(old.total_steps), std::to_string(now.total_steps));
  note("--lr", g(old.lr), g(now.lr));
  note("--min-lr-frac", g(old.min_lr / old.lr), g(now.min_lr / now.lr));
  note("--warmup", std::to_string(old.warmup_steps), std::to_string(now.warmup_steps));
  note("--lr-schedule", std::string(lr_schedule_name(old.kind)),
       std::string(lr_schedule_name(now.kind)));
  if (flags.empty()) flags = "the learning-rate flags";
  char rates[96];
  std::snprintf(rates, sizeof rates, "%.3e instead of %.3e", now.at(differs), old.at(differs));
  throw InputError(flags + " reshape the learning-rate schedule the checkpoint was trained "
                   "with (step " + std::to_string(differs + 1) + "'s rate " + rates +
                   "): resume with the run's flags, or start a new run with --init-from");
}

// Everything a resume checks before it reads a tensor, from the config alone: the state's own
// numbers, the schedule, the layout, the run identity and the data. A missing key or a wrong
// type is named with the state file.
void check_saved_run(const Json& st, const std::string& dir, const TrainerConfig& c,
                     std::uint64_t data_fingerprint) {
  const std::string state_path = (fs::path(dir) / kStateFile).string();
  try {
    check_trainer_state(st, dir, c.steps);
    check_schedule(st, c);
    (void)ch02::state_from_json(st.at("scaler"));
    (void)loader_state_from_json(st.at("loader"));
    (void)st.at("data_fingerprint").as_string();
    (void)st.at("run").as_object();
    (void)layout_of(st, dir);
  } catch (const InputError& e) {
    throw InputError(state_path + ": " + e.what());
  }
  const Layout mine{c.dp, c.tp, c.pp};
  const Layout saved = layout_of(st, dir);
  if (!(saved == mine)) {
    throw InputError(dir + ": checkpoint was written on a " + saved.str() + " grid, this run is " +
                     mine.str() + " (resuming on another layout needs resharding)");
  }
  check_identity(st.at("run"), run_identity(c), dir);
  if (st.at("data_fingerprint").as_string() != hex64(data_fingerprint)) {
    throw InputError(dir + ": checkpoint was trained on other data (token fingerprint " +
                     st.at("data_fingerprint").as_string() + ", this data " +
                     hex64(data_fingerprint) + ")");
  }
}

}  // namespace

void check_resume_checkpoint(const TrainerConfig& c, const TrainingData& data) {
  if (!c.resume) return;
  const std::string dir = latest_checkpoint(c.checkpoint_dir);
  check_saved_run(read_state(dir), dir, c, data.fingerprint);
}

void Trainer::write_checkpoint_files(const std::string& dir) const {
  const GridShape g = shape();
  const Layout layout{g.dp, g.tp, g.pp};
  const GridCoord at = coord();
  if (at.dp == 0) {  // one replica of each (tp, pp) place writes its parameters and moments
    const std::vector<NamedTensor> masters = master_weights();
    if (g.tp == 1 && g.pp == 1) {
      save_gpt_hf(dir, config_.model, masters);
    } else {
      NamedTensors named;
      for (const NamedTensor& w : masters) named.emplace_back(w.name, w.tensor);
      write_safetensors((fs::path(dir) / model_file(layout, at)).string(), named);
    }
    const AdamW& adam = *optimizer_.adamw();
    const auto entries = model_.registry().entries();
    NamedTensors moments;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      moments.emplace_back("exp_avg." + entries[i].name, adam.exp_avg(i));
      moments.emplace_back("exp_avg_sq." + entries[i].name, adam.exp_avg_sq(i));
    }
    write_safetensors((fs::path(dir) / optimizer_file(layout, at)).string(), moments);
  }
  if (at.rank != 0) return;
  const AdamW& adam = *optimizer_.adamw();
  Json shards = Json::array();
  for (int p = 0; p < g.pp; ++p) {
    for (int t = 0; t < g.tp; ++t) {
      const GridCoord place{grid_rank(g, 0, t, p), 0, t, p};
      Json s = Json::object();
      s.set("tp", static_cast<std::int64_t>(t));
      s.set("pp", static_cast<std::int64_t>(p));
      s.set("rank", static_cast<std::int64_t>(place.rank));
      s.set("parameters", model_file(layout, place));
      s.set("moments", optimizer_file(layout, place));
      shards.push_back(std::move(s));
    }
  }
  Json st = Json::object();
  st.set("format", kStateFormat);
  st.set("version", kStateVersion);
  st.set("step", step_);
  st.set("optimizer_steps", adam.step_count());
  st.set("layout", layout_json(layout));
  st.set("shards", std::move(shards));
  st.set("loader", loader_state_to_json(loader_.state()));
  st.set("scaler", ch02::state_to_json(optimizer_.scaler().state()));
  st.set("lr_schedule", schedule_json(config_.schedule));  // what a resume must not reshape
  st.set("data_fingerprint", hex64(data_.fingerprint));
  st.set("run", run_identity(config_));
  st.set("config", to_json(config_));
  write_file_atomic((fs::path(dir) / kStateFile).string(), st.dump(2) + "\n");
}

std::string Trainer::save_checkpoint() {
  return ch08::save_checkpoint(
      config_.checkpoint_dir, step_,
      [this](const std::string& dir) { write_checkpoint_files(dir); }, config_.checkpoint_keep,
      world_);
}

void Trainer::resume() {
  const std::string dir = latest_checkpoint(config_.checkpoint_dir);  // verified manifest
  const Json st = read_state(dir);
  check_saved_run(st, dir, config_, data_.fingerprint);
  const GridShape g = shape();
  const Layout mine{g.dp, g.tp, g.pp};
  const GridCoord at = coord();
  if (g.tp == 1 && g.pp == 1) {
    load_gpt_hf_into(dir, config_.model, master_weights());
  } else {
    const SafetensorsReader m((fs::path(dir) / model_file(mine, at)).string());
    for (const NamedTensor& w : master_weights()) load_moment(m, w.name, w.tensor);
  }
  const SafetensorsReader r((fs::path(dir) / optimizer_file(mine, at)).string());
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
  verify_replicas();
}

}  // namespace mixpar::ch08
