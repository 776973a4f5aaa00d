// Each field's FNV-1a 64 hash is gathered from every rank whole (comm/control.h's gather_u64),
// so two configurations are told apart in all 64 bits.
#include "config_agreement.h"

#include <cstdio>
#include <map>

#include "ch04_ddp/ring_allreduce.h"
#include "comm/control.h"
#include "mesh_rules.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string g(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string on_off(bool b) { return b ? "on" : "off"; }

}  // namespace

std::vector<std::pair<std::string, std::string>> agreement_fields(const TrainerConfig& c,
                                                                  std::uint64_t data_fingerprint) {
  const auto i = [](std::int64_t v) { return std::to_string(v); };
  char fp[17];
  std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(data_fingerprint));
  std::vector<std::pair<std::string, std::string>> fields = {
      {"--init-from", c.init_from},
      {"--n-layer", i(c.model.n_layer)},
      {"--n-head", i(c.model.n_head)},
      {"--n-embd", i(c.model.n_embd)},
      {"--n-positions", i(c.model.n_positions)},
      {"--vocab-size", i(c.model.vocab_size)},
      {"--data (its tokens)", fp},
      {"--data-order", std::string(data_order_name(c.data_order))},
      {"--batch", i(c.batch)},
      {"--seq", i(c.seq)},
      {"--grad-accum", i(c.grad_accum)},
      {"--steps", i(c.steps)},
      {"--lr", g(c.schedule.lr)},
      {"--min-lr-frac (the final rate)", g(c.schedule.min_lr)},
      {"--warmup", i(c.schedule.warmup_steps)},
      {"--lr-schedule", std::string(lr_schedule_name(c.schedule.kind))},
      {"--weight-decay", g(c.weight_decay)},
      {"--beta1", g(c.beta1)},
      {"--beta2", g(c.beta2)},
      {"--eps", g(c.eps)},
      {"--grad-clip", g(c.grad_clip)},
      // fp8 runs a bf16 working copy: named as itself, with every setting of its recipe.
      {"--dtype", c.fp8 ? std::string("fp8") : std::string(dtype_name(c.dtype))},
      {"--fp8-recipe", c.fp8 ? std::string(fp8::name(c.fp8->recipe)) : ""},
      {"--fp8-amax-history", c.fp8 ? i(c.fp8->amax_history) : ""},
      {"--fp8-margin", c.fp8 ? i(c.fp8->margin) : ""},
      {"--loss-scale", g(c.loss_scale)},
      {"--recompute", on_off(c.recompute)},
      {"--seed", std::to_string(c.seed)},
      {"--global-batch", i(c.global_batch)},
      {"--offload-optimizer", on_off(c.offload_optimizer)},
  };
  // Every dimension of the rank mesh, outermost first (--pp, --dp, --cp, --tp, and any other).
  for (const MeshDim& d : mesh_dims(c)) fields.emplace_back("--" + d.name, i(d.size));
  const std::vector<std::pair<std::string, std::string>> rest = {
      {"--cp-algo", c.cp_algo},
      {"--sequence-parallel", on_off(c.sequence_parallel)},
      {"--schedule", c.pipeline_schedule},
      {"--virtual-stages", i(c.virtual_stages)},
      {"--bucket-mb", g(c.bucket_mb)},
      {"--init-sync", c.init_sync == ch04::InitSync::kSameSeed ? "seed" : "broadcast"},
      {"--allreduce", ch04::algo_name(c.allreduce)},
      {"--no-overlap", on_off(!c.overlap)},
      {"--zero-stage", i(c.zero_stage)},
      {"--zero3-prefetch", i(c.zero3_prefetch)},
      {"--n-experts", i(c.moe.n_experts)},
      {"--top-k", i(c.moe.top_k)},
      {"--moe-every", i(c.moe_every)},
      {"--capacity-factor", g(c.moe.capacity_factor)},
      {"--drop-policy", ch09::drop_policy_name(c.moe.drop_policy)},
      {"--moe-gates", c.moe.normalize_gates ? "normalized" : "softmax"},
      {"--aux-loss-coef", g(c.moe.aux_loss_coef)},
      {"--z-loss-coef", g(c.moe.z_loss_coef)},
      {"--expert-bias-rate", g(c.moe.bias_update_rate)},
      {"--ep", i(c.ep)},
      {"--moe-dispatch", ch09::dispatch_name(c.moe_dispatch)},
      {"--check-replicas-every", i(c.check_replicas_every)},
      {"--checkpoint-dir", c.checkpoint_dir},
      {"--checkpoint-every", i(c.checkpoint_every)},
      {"--checkpoint-keep", i(c.checkpoint_keep)},
      // Every rank takes part in the collectives that commit a background write.
      {"--checkpoint-async", on_off(c.checkpoint_async)},
      {"--resume", on_off(c.resume)},
      {"--eval-every", i(c.eval_every)},
      // Validation and sampling are rank 0's, on a model every rank helps gather: the ranks
      // must agree on when that happens, not on where the files are.
      {"--val-data (given or not)", on_off(!c.val_data.empty())},
      {"--val-batches", i(c.val_batches)},
      {"--tokenizer (given or not)", on_off(!c.tokenizer.empty())},
      {"--log-jsonl (given or not)", on_off(!c.log_jsonl.empty())},
      {"--trace (given or not)", on_off(!c.trace.empty())},
      {"--save (given or not)", on_off(!c.save.empty())},
      {"--sample", i(c.sample)},
      {"--dump-logits (given or not)", on_off(!c.dump_logits.empty())},
      {"--temperature", g(c.temperature)},
      {"--sample-top-k", i(c.sample_top_k)},
      {"--sample-seed", std::to_string(c.sample_seed)},
      {"--prompt", c.prompt},
      // One rank's --dry-run returned before training while the others waited in its first
      // collective.
      {"--dry-run", on_off(c.dry_run)},
      {"--device-memory", g(c.device_memory)},
      {"--backend", std::string(comm_backend_name(c.backend))},
      {"--ranks", i(c.ranks)},
  };
  fields.insert(fields.end(), rest.begin(), rest.end());
  return fields;
}

std::vector<std::pair<std::string, std::string>> rank_local_flags() {
  return {
      {"--threads", "each process's own compute threads: the kernels' sums do not depend on them"},
      {"--print-every", "read by rank 0 alone, which prints the progress lines"},
      {"--overwrite", "read by rank 0 alone, which alone writes the outputs it governs (never a "
                      "checkpoint's files)"},
      {"--comm-timeout", "each process's own watchdog limit: it changes no value computed"},
  };
}

void agree_on_config(Communicator& comm, const TrainerConfig& c, std::uint64_t data_fingerprint) {
  const auto fields = agreement_fields(c, data_fingerprint);
  const auto n = static_cast<std::int64_t>(fields.size());
  const int ranks = comm.size();
  std::vector<std::uint64_t> mine;
  for (const auto& [flag, value] : fields) mine.push_back(fnv1a64(flag + "=" + value));
  const std::vector<std::uint64_t> all = gather_u64(comm, mine);  // every bit of every hash
  std::map<std::int64_t, std::vector<int>> differing;  // field -> ranks unlike rank 0
  for (int r = 1; r < ranks; ++r) {
    for (std::int64_t f = 0; f < n; ++f) {
      if (all[static_cast<std::size_t>(r * n + f)] != all[static_cast<std::size_t>(f)]) {
        differing[f].push_back(r);
      }
    }
  }
  if (differing.empty()) return;
  std::string what;
  for (const auto& [f, rs] : differing) {
    std::string list;
    for (int r : rs) list += (list.empty() ? "" : ", ") + std::to_string(r);
    const auto& [flag, value] = fields[static_cast<std::size_t>(f)];
    what += (what.empty() ? "" : "; ") + flag + " differs on rank" + (rs.size() > 1 ? "s " : " ") +
            list;
    if (comm.rank() == 0 && flag.find(' ') == std::string::npos) {
      what += " from rank 0's " + (value.empty() ? std::string("\"\"") : value);
    }
  }
  throw InputError("the ranks were started with different configurations: " + what +
                   " (every rank of a run needs the same flags)");
}

}  // namespace mixpar::ch08
