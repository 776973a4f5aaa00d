// A training checkpoint, the Trainer's half: what goes into the directory and how it comes
// back, on any layout (checkpoint_pieces.h). Every tensor of the optimizer state, the FP32
// masters and AdamW's m and v, is stored under its global name and shape in pieces: each rank
// writes the pieces it owns (its tp shard's boxes, its pipeline stage's parameters, its ZeRO
// flat ranges mapped back to per-parameter ranges; a replica's copy only on the lowest dp rank
// that holds it, the tied wte once, by its owner), every file carrying the index of its pieces
// with their global offsets. On resume each rank reads the pieces that overlap what its own
// layout holds, whatever grid wrote them. The 16-bit working copy is not stored: it is always
// the masters rounded (recast after every step), so it is recast from them.
//
// A grid with one writer of whole tensors (tp 1, pp 1, no ZeRO shards) writes model.safetensors
// (with config.json a Hugging Face directory: a checkpoint is also a loadable model) and
// optimizer.safetensors; any other, one model-<coordinates>.safetensors and
// optimizer-<coordinates>.safetensors per writing rank, its coordinate on every dimension of
// the mesh, outermost first (model-pp0-dp1-cp0-tp0.safetensors; before version 4 of the state,
// model-dpD-tpT-ppP.safetensors: the state lists each file by name, so both resume). Rank 0
// writes config.json and trainer_state.json: the step, the optimizer's t, the scaler, the loader and the run identity,
// which every rank shares (the scaler's decisions and the loader's steps are agreed each step;
// the RNG is counter-based: seed and step), and the writer's layout with the files each
// writing rank wrote.
#include <algorithm>
#include <bit>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>

#include "checkpoint.h"
#include "checkpoint_pieces.h"
#include "comm/device_mesh.h"
#include "io/atomic_file.h"
#include "io/gpt_config.h"
#include "io/safetensors.h"
#include "mesh_rules.h"
#include "model/gpt_hf.h"
#include "run_checks.h"
#include "strategy_factory.h"
#include "trainer.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kStateFormat = "mixpar-train-state";
// 4: the layout names every dimension of the mesh (cp too), outermost first, and the piece
// files every coordinate. 3: pieces under global names, any layout reads them (its layout dp,
// tp, pp: cp 1 or not recorded, which a resume does not need, cp ranks writing nothing of
// their own). 2: the layout and its shards (whole files of one tp x pp place; tp 1 x pp 1 read
// as whole tensors). 1 (no layout): a dp x 1 x 1 run, read as such.
constexpr std::int64_t kStateVersion = 4;

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The saved run identity against this run's, naming the first field that differs. The grid is
// not part of it: a checkpoint resumes on any layout. What the data needs is the samples of
// each optimizer step, dp x --batch x --grad-accum: the loader's place is a global sample
// (token_loader.h), so a run saved at dp 4 resumes at dp 2 with twice the accumulation, or at
// dp 8 with half the batch, and reads exactly the samples that follow. A state saved before
// the loader stored its sample (per_sample false) counted micro-batches of dp x batch rows:
// those two compared as their product, and --grad-accum as it is.
// A key the saved identity lacks (a checkpoint written before it was part of it) is read from
// the state's full "config" record, which has always held it. A difference names the flag.
void check_identity(const Json& saved, const Json& now, const Json* config,
                    const std::string& dir, bool per_sample) {
  const auto rows = [](const Json& j) { return j.at("dp").as_int() * j.at("batch").as_int(); };
  const auto accum = [&](const Json& j, const Json* cfg) {
    if (const Json* a = j.find("grad_accum")) return a->as_int();
    if (cfg != nullptr) {
      if (const Json* a = cfg->find("grad_accum")) return a->as_int();
    }
    return std::int64_t{1};
  };
  if (per_sample && saved.contains("dp") && saved.contains("batch")) {
    const std::int64_t was = rows(saved) * accum(saved, config);
    const std::int64_t is = rows(now) * accum(now, nullptr);
    if (was != is) {
      throw InputError(dir + ": checkpoint was written by a run of dp " + saved.at("dp").dump() +
                       " x batch " + saved.at("batch").dump() + " x grad-accum " +
                       std::to_string(accum(saved, config)) + " = " + std::to_string(was) +
                       " sequences per step, this run has dp " + now.at("dp").dump() +
                       " x batch " + now.at("batch").dump() + " x grad-accum " +
                       now.at("grad_accum").dump() + " = " + std::to_string(is) +
                       " (another layout keeps --dp x --batch x --grad-accum)");
    }
  } else if (saved.contains("dp") && saved.contains("batch") && rows(saved) != rows(now)) {
    throw InputError(dir + ": checkpoint was written by a run of dp " + saved.at("dp").dump() +
                     " x batch " + saved.at("batch").dump() + " = " +
                     std::to_string(rows(saved)) + " sequences per micro-batch, this run has dp " +
                     now.at("dp").dump() + " x batch " + now.at("batch").dump() + " = " +
                     std::to_string(rows(now)) + " (another layout keeps --dp x --batch)");
  }
  for (const auto& [key, value] : now.as_object()) {
    if (key == "dp" || key == "batch" || (per_sample && key == "grad_accum")) continue;
    const Json* s = saved.find(key);
    if (s == nullptr && config != nullptr) s = config->find(key);
    if (!s || !(*s == value)) {
      // The key's first flag (--dtype's value names fp8's recipe, history and margin).
      std::string flag = key;
      for (const auto& [f, held_by] : resume_identity_flags()) {
        if (held_by == key) {
          flag = f;
          break;
        }
      }
      throw InputError(dir + ": checkpoint was written by a run with " + flag + " " +
                       (s ? s->dump() : "(absent)") + ", this run has " + value.dump() +
                       " (a resume keeps every flag that changes training; start a new run with "
                       "--init-from instead)");
    }
  }
}

// The FP8 delayed-scaling state (fp8_linear.h), each FP32 value as its bit pattern: exact,
// NaN included, whatever JSON's numbers print.
Json fp8_state_to_json(const std::vector<float>& values) {
  Json a = Json::array();
  for (float v : values) a.push_back(static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(v)));
  return a;
}

std::vector<float> fp8_state_from_json(const Json& j, const std::string& dir) {
  std::vector<float> out;
  if (!j.is_array()) throw InputError(dir + ": fp8_scaling is not an array");
  for (const Json& v : j.as_array()) {
    if (!v.is_integer() || v.as_int() < 0 || v.as_int() > 0xFFFFFFFFll) {
      throw InputError(dir + ": fp8_scaling holds a value that is no FP32 bit pattern");
    }
    out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(v.as_int())));
  }
  return out;
}

Json read_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / kStateFile).string();
  Json st = Json::parse(read_file(path), path);
  const bool known = st.is_object() && st.contains("format") &&
                     st.at("format") == Json(kStateFormat) && st.contains("version") &&
                     (st.at("version") == Json(kStateVersion) || st.at("version") == Json(3) ||
                      st.at("version") == Json(2) || st.at("version") == Json(1));
  if (!known) {
    throw InputError(path + ": not a mixpar training state (format " + kStateFormat + " version " +
                     std::to_string(kStateVersion) + ")");
  }
  return st;
}

// The mesh a checkpoint was written on, as its state names it.
struct Layout {
  std::vector<MeshDim> dims;  // outermost first (mesh_rules.h)
  // GradSync::sharding_stage (ZeRO's numbering): >= 1 with dp > 1, each dp rank wrote the
  // pieces it owns. Stored under the key "zero_stage".
  std::int64_t sharding_stage = 0;
  int size(std::string_view name) const {
    for (const MeshDim& d : dims) {
      if (d.name == name) return d.size;
    }
    return 1;
  }
  std::string str() const { return mesh_text(dims); }
  // One rank writes every tensor whole: the files of a Hugging Face directory.
  bool single_writer() const {
    for (const MeshDim& d : dims) {
      if (d.size > 1 && !holds_whole_state(d.name)) return false;
    }
    return true;
  }
  // Every rank along `name` holds the whole state the others do: the replica dimensions dp (but
  // ZeRO shards the state over dp) and cp (whose ranks hold the same parameters: the gradient
  // group dp x cp, parallel_grid.h).
  bool holds_whole_state(std::string_view name) const {
    return name == "cp" || (name == "dp" && sharding_stage == 0);
  }
};

Layout layout_of(const DeviceMesh& mesh, std::int64_t sharding_stage) {
  return Layout{mesh.dims(), sharding_stage};
}

Json layout_json(const Layout& l) {
  Json j = Json::object();
  for (const MeshDim& d : l.dims) j.set(d.name, static_cast<std::int64_t>(d.size));
  j.set("zero_stage", l.sharding_stage);
  return j;
}

// A degree as the state stores it, clamped into an int (anything < 1 is refused below).
int degree(std::int64_t v) { return static_cast<int>(std::clamp<std::int64_t>(v, 0, 1 << 20)); }

// The mesh of a state before version 4: the standard one with cp 1.
std::vector<MeshDim> dims_before_v4(std::int64_t dp, std::int64_t tp, std::int64_t pp) {
  return standard_dims(degree(dp), degree(tp), 1, degree(pp));
}

Layout layout_of(const Json& state, const std::string& path) {
  Layout l;
  if (!state.contains("layout")) {  // version 1: data parallel only
    l.dims = dims_before_v4(state.at("run").at("dp").as_int(), 1, 1);
    return l;
  }
  const Json& j = state.at("layout");
  if (const Json* z = j.find("zero_stage")) l.sharding_stage = z->as_int();
  if (state.at("version").as_int() < 4) {  // dp, tp, pp: cp 1 (or not recorded)
    l.dims = dims_before_v4(j.at("dp").as_int(), j.at("tp").as_int(), j.at("pp").as_int());
  } else {
    for (const auto& [name, size] : j.as_object()) {
      if (name == "zero_stage") continue;
      l.dims.push_back({name, degree(size.as_int()), name == "dp" || name == "tp" || name == "pp"});
    }
  }
  for (const MeshDim& d : l.dims) {
    if (d.size < 1) throw InputError(path + ": layout " + l.str() + " is not a grid");
  }
  return l;
}

// The files a rank writes: one writer of whole tensors writes model.safetensors and
// optimizer.safetensors, every writer of a sharded layout its own pair, named by its
// coordinate on every dimension.
std::string piece_file(const char* what, const Layout& l, const DeviceMesh& mesh, int rank) {
  if (l.single_writer()) return std::string(what) + ".safetensors";
  std::string name = what;
  for (const MeshDim& d : l.dims) name += "-" + d.name + std::to_string(mesh.coord(rank, d.name));
  return name + ".safetensors";
}

// Who writes: every dp rank of a sharded layout (each owns its flat ranges), dp rank 0
// otherwise (the replicas hold the same tensors); along a dimension whose ranks hold the same
// parameters and shards (cp: context parallelism shards none), its rank 0 alone.
bool writes_files(const Layout& l, const DeviceMesh& mesh, int rank) {
  for (const MeshDim& d : l.dims) {
    if (l.holds_whole_state(d.name) && mesh.coord(rank, d.name) != 0) return false;
  }
  return true;
}

// The piece files of a checkpoint, as its state lists them. Version 1 and 2 states of one
// tp x pp place wrote whole tensors (model.safetensors, optimizer.safetensors): pieces too.
std::vector<std::string> state_files(const Json& st, const std::string& dir) {
  const Layout saved = layout_of(st, dir);
  std::vector<std::string> out;
  const auto path = [&](const std::string& name) {
    if (name.empty() || name.find('/') != std::string::npos) {
      throw InputError(dir + "/" + kStateFile + ": " + name + " is not a file of the checkpoint");
    }
    out.push_back((fs::path(dir) / name).string());
  };
  if (st.at("version").as_int() < 3) {
    if (saved.size("tp") != 1 || saved.size("pp") != 1) {
      throw InputError(dir + ": a version " + st.at("version").dump() + " checkpoint of a " +
                       saved.str() + " grid stores each place's tensors in its own shape; "
                       "resharding reads version 3 (write it again with this build)");
    }
    path("model.safetensors");
    path("optimizer.safetensors");
    return out;
  }
  for (const Json& s : st.at("shards").as_array()) {
    path(s.at("parameters").as_string());
    path(s.at("moments").as_string());
  }
  return out;
}

// The checkpoint's config.json, when it has one, describes this run's model.
void check_config_json(const std::string& dir, const GptConfig& want) {
  if (!fs::exists(fs::path(dir) / "config.json")) return;
  const GptConfig got = read_gpt_hf_config(dir);
  if (const std::string diff = config_difference(got, want); !diff.empty())
    throw InputError(dir + ": model shape differs: " + diff);
}

// A loaded weight that is not finite would make every loss NaN: refused, naming it.
void check_finite(const std::string& source, const HeldTensor& t) {
  const std::vector<float> v = t.data.to_floats();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw InputError(source + ": tensor " + t.key + " holds a non-finite value (" +
                       (std::isnan(v[i]) ? std::string("nan") : std::string(v[i] > 0 ? "inf" : "-inf")) +
                       " at element " + std::to_string(i) + " of this rank's " +
                       std::to_string(v.size()) + ")");
    }
  }
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
  (void)state_files(st, dir);  // a layout whose files this build reads
  check_identity(st.at("run"), run_identity(c), st.find("config"), dir,
                 loader_state_from_json(st.at("loader")).samples >= 0);
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

std::vector<HeldTensor> Trainer::held_state() const {
  const GridCoord at = coord();
  const AdamW& adam = *optimizer_.adamw();
  // Every parameter this rank steps: its model's registry, or with several model chunks
  // (chapter 7's interleaved pipeline) the one registry of them all. Each entry has its
  // global name, so each chunk's pieces map like any stage's.
  const ParamRegistry& params = rank_params(model_);
  const auto entries = params.entries();
  std::vector<HeldTensor> out;
  // The optimizer's k-th tensor is the sync's k-th owned piece: a whole entry's held tensor,
  // or under a sharding sync a flat range of one (checkpoint_pieces.h maps either to the
  // global tensor).
  const std::vector<OwnedPiece> pieces = sync_->owned_pieces(params);
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const OwnedPiece& p = pieces[k];
    const ParamEntry& e = entries[p.entry];
    std::vector<PieceRun> runs = flat_runs(e, p.entry_offset, p.count);
    // Written once: not the tied wte's second copy (its owner, stage 0, writes wte), a tensor
    // every tp rank holds whole only by tp rank 0, and, replicated over dp, only by dp rank 0.
    const bool writes = !e.holding.tied_copy && (sharded() || at.dp == 0) && at.cp == 0 &&
                        (is_tp_part(e.holding) || at.tp == 0);
    const std::pair<std::string, const Tensor*> parts[] = {
        {e.name, &optimizer_.stepped_params()[k]},
        {"exp_avg." + e.name, &adam.exp_avg(k)},
        {"exp_avg_sq." + e.name, &adam.exp_avg_sq(k)}};
    for (const auto& [key, data] : parts) {
      out.push_back({key, global_shape(e), held_boxes(e), runs, *data, writes});
    }
  }
  return out;
}

namespace {

// The staging copy of one tensor this rank writes: its elements in host memory, billed to
// this rank's ledger (host side, "other") until the background write is done with it.
HeldTensor staged_copy(const HeldTensor& t) {
  HeldTensor c = t;
  HostMemoryScope host;
  const Tensor src = t.data.is_cpu() ? t.data : t.data.to_device(Device::kCPU);
  c.data = Tensor::empty(src.shape(), DType::kF32, MemCategory::kOther);
  std::copy_n(src.data_as<float>(), src.numel(), c.data.data_as<float>());
  return c;
}

}  // namespace

StagedCheckpoint Trainer::checkpoint_files(bool staged) const {
  const DeviceMesh mesh = mesh_of(config_);
  const Layout layout = layout_of(mesh, sync_->sharding_stage());
  const int me = coord().rank;
  StagedCheckpoint out;
  if (writes_files(layout, mesh, me)) {
    const std::size_t billed_before = current_ledger().host_live_total();
    auto masters = std::make_shared<std::vector<HeldTensor>>();
    auto moments = std::make_shared<std::vector<HeldTensor>>();
    std::vector<HeldTensor> held = held_state();
    for (HeldTensor& t : moe_held_state()) held.push_back(std::move(t));
    for (std::size_t i = 0; i < held.size(); ++i) {
      const HeldTensor& t = held[i];
      // A staged copy holds only what this rank writes (a replica's tensors are another's).
      if (staged && !t.writes) continue;
      (t.key.starts_with("exp_avg") ? *moments : *masters)
          .push_back(staged ? staged_copy(t) : t);
      if (staged && i == held.size() / 2 &&
          fault_asked("MIXPAR_KILL_DURING_CHECKPOINT_STAGING", step_)) {
        ::raise(SIGKILL);
      }
    }
    out.bytes = current_ledger().host_live_total() - billed_before;
    const std::string model = piece_file("model", layout, mesh, me);
    const std::string optimizer = piece_file("optimizer", layout, mesh, me);
    out.files.push_back([masters, model](const std::string& dir, const WriteControl&) {
      write_pieces((fs::path(dir) / model).string(), *masters);
      return model;
    });
    out.files.push_back([moments, optimizer](const std::string& dir, const WriteControl&) {
      write_pieces((fs::path(dir) / optimizer).string(), *moments);
      return optimizer;
    });
  }
  if (me != 0) return out;
  const AdamW& adam = *optimizer_.adamw();
  Json shards = Json::array();
  for (int r = 0; r < mesh.world(); ++r) {
    if (!writes_files(layout, mesh, r)) continue;
    Json s = Json::object();
    s.set("rank", static_cast<std::int64_t>(r));
    for (const MeshDim& d : mesh.dims()) {
      s.set(d.name, static_cast<std::int64_t>(mesh.coord(r, d.name)));
    }
    s.set("parameters", piece_file("model", layout, mesh, r));
    s.set("moments", piece_file("optimizer", layout, mesh, r));
    shards.push_back(std::move(s));
  }
  // The model's shape, as a Hugging Face config (with model.safetensors of one writer, a
  // directory transformers loads).
  const HfGpt2Config hf = hf_config_from_gpt(config_.model, DType::kF32);
  out.files.push_back([hf](const std::string& dir, const WriteControl&) {
    write_gpt2_config((fs::path(dir) / "config.json").string(), hf);
    return std::string("config.json");
  });
  Json st = Json::object();
  st.set("format", kStateFormat);
  st.set("version", kStateVersion);
  st.set("step", step_);
  st.set("optimizer_steps", adam.step_count());
  st.set("layout", layout_json(layout));
  st.set("shards", std::move(shards));
  st.set("loader", loader_state_to_json(loader_.state()));
  st.set("scaler", ch02::state_to_json(optimizer_.scaler().state()));
  if (fp8_ && config_.fp8->recipe == fp8::Recipe::kDelayed) {
    // Every rank holds the same histories of every layer (end_fp8_step): rank 0's are all.
    st.set("fp8_scaling", fp8_state_to_json(fp8_->state()));
  }
  st.set("lr_schedule", schedule_json(config_.schedule));  // what a resume must not reshape
  st.set("data_fingerprint", hex64(data_.fingerprint));
  st.set("run", run_identity(config_));
  st.set("config", to_json(config_));
  // The state as text now: the scaler, the loader and the RNG's step move on with the run.
  out.files.push_back([text = st.dump(2) + "\n"](const std::string& dir, const WriteControl&) {
    write_file_atomic((fs::path(dir) / kStateFile).string(), text);
    return std::string(kStateFile);
  });
  return out;
}

StagedCheckpoint Trainer::stage_checkpoint() {
  gather_moe_state();
  return checkpoint_files(true);
}

void Trainer::gather_moe_state() {
  moe_whole_.clear();
  if (!moe_) return;
  const AdamW& adam = *optimizer_.adamw();
  const std::size_t n = optimizer_.stepped_params().size() - dense_tensors_;
  moe_->gather_whole();  // ZeRO-3: the experts from their edp ranges (collective over edp)
  const std::vector<Tensor> whole = moe_->whole_params();
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t k = dense_tensors_ + j;
    // Whole on this rank (the moments from their edp ranges, ZeRO), then every ep rank's.
    const Tensor mine[] = {whole[j], moe_->gather_over_edp(adam.exp_avg(k), j),
                           moe_->gather_over_edp(adam.exp_avg_sq(k), j)};
    for (std::size_t m = 0; m < 3; ++m) {
      const bool expert = moe_->is_expert_tensor(j);
      Tensor all = expert ? moe_->gather_experts(mine[m]) : mine[m];
      // ZeRO-3 on ep 1: the master is the whole tensor itself, released below: a copy.
      if (m == 0 && expert && moe_->shards_expert_params() && moe_->ep() == 1) {
        all = all.clone();
      }
      moe_whole_.push_back(all);
    }
  }
  moe_->release_whole();
  for (std::size_t b = 0; b < moe_->blocks(); ++b) {
    const std::vector<float>& bias = moe_->layer(b).expert_bias();
    moe_whole_.push_back(
        Tensor::from_floats(bias, {static_cast<std::int64_t>(bias.size())}));
  }
}

std::vector<HeldTensor> Trainer::moe_held_state() const {
  std::vector<HeldTensor> out;
  if (!moe_) return out;
  const AdamW& adam = *optimizer_.adamw();
  const bool whole = !moe_whole_.empty();
  // Written once: by the dp x cp x tp rank 0 of each stage (every expert gathered there).
  const bool writes = whole && coord().dp == 0 && coord().cp == 0 && coord().tp == 0;
  const std::size_t n = optimizer_.stepped_params().size() - dense_tensors_;
  // Rows [first_row, first_row + rows) of the global tensor, of which the flat range
  // [begin, begin + data's elements) (a ZeRO range over edp, or all of them).
  const auto piece = [&](const std::string& key, const Shape& global, const Tensor& data,
                         std::int64_t first_row, std::int64_t rows, std::int64_t begin) {
    Shape offset(global.size(), 0), shape = global;
    offset[0] = first_row;
    shape[0] = rows;
    const std::int64_t per_row = shape_numel(global) / global[0];
    const std::int64_t count = data.numel();
    out.push_back({key, global, {PieceBox{offset, shape, begin, count}},
                   {PieceRun{first_row * per_row + begin, 0, count}}, data, writes});
  };
  // ZeRO-3: a rank's masters are its edp range, like its moments (moe_blocks.h).
  const bool ranges = moe_->shards_expert_params();
  const std::vector<Tensor> params = ranges ? moe_->params() : moe_->whole_params();
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t k = dense_tensors_ + j;
    const std::string key = moe_->key(j);
    const Shape global = moe_->global_shape(j);
    if (whole) {
      for (std::size_t m = 0; m < 3; ++m) {
        const char* prefix[] = {"", "exp_avg.", "exp_avg_sq."};
        piece(prefix[m] + key, global, moe_whole_[3 * j + m], 0, global[0], 0);
      }
      continue;
    }
    // A resume fills this rank's own rows of the masters, and its own range of the moments.
    const bool experts = moe_->is_expert_tensor(j);
    const std::int64_t first = experts ? moe_->first_expert() : 0;
    const std::int64_t rows = experts ? global[0] / moe_->ep() : global[0];
    const std::int64_t begin = moe_->owned_range(j).first;
    piece(key, global, params[j], first, rows, ranges ? begin : 0);
    piece("exp_avg." + key, global, adam.exp_avg(k), first, rows, begin);
    piece("exp_avg_sq." + key, global, adam.exp_avg_sq(k), first, rows, begin);
  }
  for (std::size_t b = 0; b < moe_->blocks(); ++b) {
    const std::int64_t E = config_.moe.n_experts;
    const Tensor bias = whole ? moe_whole_[3 * n + b]
                              : Tensor::zeros({E}, DType::kF32, MemCategory::kOther);
    piece(moe_->bias_key(b), {E}, bias, 0, E, 0);
  }
  return out;
}

void Trainer::write_checkpoint_files(const std::string& dir) const {
  const WriteControl now;
  for (const CheckpointFileWriter& write : checkpoint_files(false).files) write(dir, now);
}

std::string Trainer::save_checkpoint() {
  gather_moe_state();  // collective over ep, on every rank
  return ch08::save_checkpoint(
      config_.checkpoint_dir, step_,
      [this](const std::string& dir) { write_checkpoint_files(dir); }, config_.checkpoint_keep,
      world_);
}

void Trainer::resume() {
  const std::string dir = latest_checkpoint(config_.checkpoint_dir);  // verified manifest
  const Json st = read_state(dir);
  check_saved_run(st, dir, config_, data_.fingerprint);
  check_config_json(dir, config_.model);
  // Every rank reads the pieces that overlap its own, whatever layout wrote them.
  std::vector<HeldTensor> held = held_state();
  moe_whole_.clear();  // this rank's own rows of the MoE blocks' tensors
  for (HeldTensor& t : moe_held_state()) held.push_back(std::move(t));
  on_every_rank(world_, "reading " + dir, [&] {
    try {
      read_pieces(state_files(st, dir), held);
    } catch (const InputError& e) {
      // A file's own error names the file; a piece that is missing or doubled names the
      // checkpoint it should have come from.
      const std::string why = e.what();
      throw InputError(why.starts_with(dir) ? why : dir + ": " + why);
    }
    for (const HeldTensor& t : held) check_finite(dir, t);  // as --init-from checks its weights
  });
  optimizer_.adamw()->set_step_count(st.at("optimizer_steps").as_int());
  optimizer_.scaler().load_state(ch02::state_from_json(st.at("scaler")));
  if (fp8_ && config_.fp8->recipe == fp8::Recipe::kDelayed) {
    const Json* f = st.find("fp8_scaling");
    if (f == nullptr) throw InputError(dir + ": the checkpoint holds no FP8 scaling state");
    fp8_->restore(fp8_state_from_json(*f, dir));
  }
  if (moe_) {  // the expert biases, read into tensors of their own: back into the layers
    const std::size_t bias_first = held.size() - moe_->blocks();
    for (std::size_t b = 0; b < moe_->blocks(); ++b) {
      moe_->layer(b).expert_bias() = held[bias_first + b].data.to_floats();
    }
  }
  loader_.restore(loader_state_from_json(st.at("loader")));
  step_ = st.at("step").as_int();
  recast_working_copy();
  verify_replicas();
}

void Trainer::load_hf_pieces(const std::string& dir) {
  check_config_json(dir, config_.model);
  // The masters only: a fresh run's moments are zeros.
  std::vector<HeldTensor> masters;
  for (HeldTensor& t : held_state()) {
    if (!t.key.starts_with("exp_avg")) masters.push_back(std::move(t));
  }
  const std::string file = (fs::path(dir) / "model.safetensors").string();
  on_every_rank(world_, "reading " + file, [&] {
    read_pieces(std::span<const std::string>(&file, 1), masters);
    for (const HeldTensor& t : masters) check_finite(file, t);
  });
}

}  // namespace mixpar::ch08
