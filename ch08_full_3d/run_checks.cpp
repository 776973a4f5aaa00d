// The probes behind check_outputs: one exclusive create and one unlink per output, in the
// directory the output will land in (atomic writes rename a temporary there, so the directory,
// not an existing file, is what has to be writable).
#include "run_checks.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "io/atomic_file.h"
#include "util/checked_math.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace fs = std::filesystem;
namespace {

// A file created and removed in dir; InputError naming the flag when that fails.
void probe_directory(const std::string& flag, const std::string& path, const fs::path& dir) {
  const fs::path probe = dir / (".mixpar-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw InputError(flag + " " + path + ": cannot write in " + dir.string() + ": " +
                     std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// A device node, FIFO or socket (or a link to one) is never replaced, --overwrite or not.
void check_replaceable_output(const std::string& flag, const std::string& path) {
  try {
    check_replaceable(path);
  } catch (const InputError& e) {
    throw InputError(flag + " " + e.what());
  }
}

// An output file: not a directory, its directory existing and writable.
void check_output_file(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(flag + " " + path + " is a directory");
  check_replaceable_output(flag, path);
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) {
    throw InputError(flag + " " + path + ": directory " + dir.string() + " does not exist");
  }
  probe_directory(flag, path, dir);
}

// An output directory: a directory if it exists, else creatable under its nearest existing
// ancestor (which must be a writable directory).
void check_output_dir(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!fs::is_directory(path, ec)) {
      throw InputError(flag + " " + path + " is a file, not a directory");
    }
    // A model directory's files are replaced as the files above are.
    for (const char* name : {"config.json", "model.safetensors"}) {
      check_replaceable_output(flag, (fs::path(path) / name).string());
    }
    probe_directory(flag, path, path);
    return;
  }
  fs::path ancestor = fs::absolute(path, ec).parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec)) ancestor = ancestor.parent_path();
  if (ancestor.empty()) ancestor = ".";
  if (!fs::is_directory(ancestor, ec)) {
    throw InputError(flag + " " + path + ": " + ancestor.string() + " is not a directory");
  }
  probe_directory(flag, path, ancestor);
}

// An output path as the file system will see it: the realpath of its longest existing prefix
// (symbolic links and "..", so two spellings of one path compare equal) and the rest
// normalised, without a trailing separator.
fs::path resolve_output(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}

// Whether p lies strictly inside dir (both resolved).
bool lies_inside(const fs::path& p, const fs::path& dir) {
  auto d = dir.begin();
  auto q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (q == p.end() || *q != *d) return false;
  }
  return q != p.end();
}

struct PlannedOutput {
  std::string flag, path;
  fs::path resolved;
  const char* why_alone;  // a directory's: why nothing else may go inside it; null for a file
};

// The checkpoint directory `path` is in, if any: a directory holding `latest` (a checkpoint
// root) or `manifest.json` (one step's checkpoint), the path itself or an ancestor. Writing
// there would corrupt a checkpoint (a checksum no longer matching its manifest) or be taken
// for one.
std::string checkpoint_dir_holding(const std::string& path) {
  std::error_code ec;
  for (fs::path p = resolve_output(path); !p.empty(); p = p.parent_path()) {
    if (fs::is_regular_file(p / "latest", ec) || fs::is_regular_file(p / "manifest.json", ec)) {
      return p.string();
    }
    if (p == p.parent_path()) break;
  }
  return {};
}

void refuse_checkpoint_target(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const std::string ck = checkpoint_dir_holding(path);
  if (!ck.empty()) {
    throw InputError(flag + " " + path + " is inside the checkpoint directory " + ck +
                     ": outputs never go into a checkpoint (choose another path)");
  }
}

// An existing output is replaced only with --overwrite. A --save directory counts as existing
// when it holds anything.
void refuse_existing(const std::string& flag, const std::string& path, bool overwrite) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return;
  if (fs::is_directory(path, ec) && fs::is_empty(path, ec)) return;
  if (overwrite) {
    // --overwrite replaces what this project wrote: a model directory (config.json or
    // model.safetensors in it), never files into any directory that happens to exist.
    if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "config.json", ec) &&
        !fs::exists(fs::path(path) / "model.safetensors", ec)) {
      throw InputError(flag + " " + path +
                       " is a directory that holds no model (no config.json nor "
                       "model.safetensors): --overwrite replaces a model directory only");
    }
    return;
  }
  throw InputError(flag + " " + path + " exists: pass --overwrite to replace it, or choose another path");
}

}  // namespace

// One output plan per run: every path the run writes, resolved and compared with every other
// before any work. Two outputs on one path destroy each other (--log-jsonl x --trace x); an
// output inside this run's own checkpoint directory or --save directory would overwrite (or be
// taken for) one of their files (--log-jsonl ck/latest turned the pointer into a log, --save
// ck/step-00000002 replaced the checkpoint's model, exit 0 both times).
void check_output_plan(const TrainerConfig& c) {
  std::vector<PlannedOutput> plan;
  const auto add = [&](const char* flag, const std::string& path, const char* why_alone) {
    if (!path.empty()) plan.push_back({flag, path, resolve_output(path), why_alone});
  };
  add("--checkpoint-dir", c.checkpoint_dir, "outputs never go into a checkpoint directory");
  add("--save", c.save, "--save writes a model directory of its own");
  add("--log-jsonl", c.log_jsonl, nullptr);
  add("--trace", c.trace, nullptr);
  add("--dump-logits", c.dump_logits, nullptr);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    for (std::size_t j = i + 1; j < plan.size(); ++j) {
      const PlannedOutput& a = plan[i];
      const PlannedOutput& b = plan[j];
      if (a.resolved == b.resolved) {
        throw InputError(a.flag + " " + a.path + " and " + b.flag + " " + b.path +
                         " are the same path (" + a.resolved.string() +
                         "): each output needs its own");
      }
      for (const auto& [outer, inner] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        if (outer->why_alone != nullptr && lies_inside(inner->resolved, outer->resolved)) {
          throw InputError(inner->flag + " " + inner->path + " lies inside " + outer->flag + " " +
                           outer->path + ": " + outer->why_alone + " (choose another path)");
        }
      }
    }
  }
  // A new checkpoint directory inside an existing checkpoint (a step's directory, or another
  // run's root) would be taken for part of it, or corrupt it.
  if (!c.checkpoint_dir.empty()) {
    const fs::path root = resolve_output(c.checkpoint_dir);
    for (fs::path p = root.parent_path(); !p.empty(); p = p.parent_path()) {
      std::error_code ec;
      if (fs::is_regular_file(p / "latest", ec) || fs::is_regular_file(p / "manifest.json", ec)) {
        throw InputError("--checkpoint-dir " + c.checkpoint_dir +
                         " lies inside the checkpoint directory " + p.string() +
                         ": a checkpoint directory never goes into another (choose another path)");
      }
      if (p == p.parent_path()) break;
    }
  }
}


void check_derived_sizes(const TrainerConfig& c) {
  const std::int64_t B = c.batch, T = c.seq, dp = c.dp;
  const GptConfig& m = c.model;
  checked_product("tokens per micro-batch", {{"--batch", B}, {"--seq", T}});
  checked_sum("tokens one micro-batch of every replica reads",
              checked_product("tokens one micro-batch of every replica reads",
                              {{"--dp", dp}, {"--batch", B}, {"--seq", T}}),
              1);
  checked_product("tokens per optimizer step",
                  {{"--batch", B}, {"--grad-accum", c.grad_accum}, {"--dp", dp}, {"--seq", T}});
  checked_product("the bytes of a micro-batch's logits",
                  {{"", 4}, {"--batch", B}, {"--seq", T}, {"vocab_size", m.vocab_size}});
  checked_product("the bytes of one block's attention scores",
                  {{"", 4}, {"--batch", B}, {"n_head", m.n_head}, {"--seq", T}, {"--seq", T}});
  checked_product("the bytes of the blocks' MLP activations",
                  {{"", 4}, {"--batch", B}, {"--seq", T}, {"", 4}, {"n_embd", m.n_embd},
                   {"n_layer", m.n_layer}});
}

void refuse_empty_paths(const ArgParser& a) {
  for (const char* flag : {"init-from", "data", "val-data", "tokenizer", "save",
                           "checkpoint-dir", "log-jsonl", "dump-logits", "trace"}) {
    if (a.given(flag) && a.get(flag).empty()) {
      throw InputError(std::string("--") + flag +
                       " \"\": an empty path (name a file or directory, or leave the flag out)");
    }
  }
}

// One rule for every output path: never into a checkpoint directory, never over an existing
// output without --overwrite (a resumed run continues its --log-jsonl).
void check_outputs(const TrainerConfig& c) {
  check_output_plan(c);
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--save", &c.save},
                                   {"--log-jsonl", &c.log_jsonl},
                                   {"--trace", &c.trace},
                                   {"--dump-logits", &c.dump_logits}}) {
    refuse_checkpoint_target(flag, *path);
  }
  check_output_dir("--save", c.save);
  check_output_file("--log-jsonl", c.log_jsonl);
  check_output_file("--trace", c.trace);
  check_output_file("--dump-logits", c.dump_logits);
  refuse_existing("--save", c.save, c.overwrite);
  refuse_existing("--trace", c.trace, c.overwrite);
  refuse_existing("--dump-logits", c.dump_logits, c.overwrite);
  std::error_code ec;
  if (!c.log_jsonl.empty() && !c.resume && !c.overwrite && fs::exists(c.log_jsonl, ec)) {
    throw InputError("--log-jsonl " + c.log_jsonl +
                     " exists: a fresh run would replace it (pass --overwrite, choose another "
                     "file, or --resume to continue it)");
  }
}

void check_step_fits_the_data(const TrainerConfig& c, const TrainingData& data) {
  const std::int64_t tokens = static_cast<std::int64_t>(data.tokens->size());
  const std::int64_t window = c.dp * c.batch * c.seq;
  const std::int64_t windows = window > 0 ? (tokens - 1) / window : 0;
  if (windows > 0 && c.grad_accum > windows) {
    // Named by the flag the user gave: --global-batch sets the micro-batches itself.
    const std::string flag = c.global_batch > 0
                                 ? "--global-batch " + std::to_string(c.global_batch) +
                                       " (--batch x --dp x " + std::to_string(c.grad_accum) +
                                       " micro-batches)"
                                 : "--grad-accum " + std::to_string(c.grad_accum);
    throw InputError(flag + ": one optimizer step would read " + std::to_string(c.grad_accum) +
                     " windows of dp x B x T = " + std::to_string(window) +
                     " tokens, more than the " + std::to_string(windows) + " the data holds (" +
                     data.description + "); lower " +
                     (c.global_batch > 0 ? "--global-batch" : "--grad-accum or --batch"));
  }
}

void check_prompts(const TrainerConfig& c, const TrainingData& data) {
  const std::int64_t context = std::min(c.seq, c.model.n_positions);
  const bool reads_prompt = c.sample > 0 || !c.dump_logits.empty();
  if (reads_prompt && data.tokenizer) {
    const std::vector<std::int32_t> ids = encode_prompt(c.prompt, data);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= c.model.vocab_size) {
        throw InputError("--prompt: token " + std::to_string(i) + " is id " +
                         std::to_string(ids[i]) + ", outside the model's vocabulary (vocab_size " +
                         std::to_string(c.model.vocab_size) + ")");
      }
    }
  }
  if (reads_prompt) {
    // The model attends over at most n_positions tokens: a longer prompt cannot be read whole.
    const auto n = static_cast<std::int64_t>(encode_prompt(c.prompt, data).size());
    if (n > c.model.n_positions) {
      throw InputError("--prompt encodes to " + std::to_string(n) + " tokens, more than the " +
                       std::to_string(c.model.n_positions) + " positions of the model");
    }
  }
  if (reads_prompt && !data.tokenizer) {
    for (std::size_t i = 0; i < c.prompt.size(); ++i) {
      const auto id = static_cast<unsigned char>(c.prompt[i]);
      if (id >= c.model.vocab_size) {
        throw InputError("--prompt: byte " + std::to_string(id) + " at offset " +
                         std::to_string(i) + " is outside the vocabulary (vocab_size " +
                         std::to_string(c.model.vocab_size) + ")");
      }
    }
  }
  if (!c.builtin_data()) return;
  // Evaluation completes "\n" + prompt: the longest must leave the context a token to fill.
  std::size_t longest = 0;
  for (const AdditionProblem& p : data.heldout) longest = std::max(longest, p.prompt().size() + 1);
  if (static_cast<std::int64_t>(longest) >= context) {
    throw InputError("--seq " + std::to_string(c.seq) + ": the held-out problems' prompts take " +
                     std::to_string(longest) + " tokens (a newline and e.g. \"" +
                     data.heldout.front().prompt() + "\"), which leaves no room in a " +
                     std::to_string(context) + "-token context; use --seq " +
                     std::to_string(longest + 1) + " or more");
  }
}

}  // namespace mixpar::ch08
