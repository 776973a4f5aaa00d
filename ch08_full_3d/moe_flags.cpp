// train_gpt's flags for chapter 9's MoE blocks: declared, read and checked here, so the
// trainer's flag file stays about the dense model.
#include "moe_flags.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "moe_blocks.h"
#include "report/format.h"
#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

void check_range(bool ok, const std::string& what) {
  if (!ok) throw InputError(what);
}

}  // namespace

// Chapter 9: the MoE blocks and their expert parallelism.
void add_moe_flags(ArgParser& a) {
  a.option("n-experts", "0",
           "experts of each MoE block (chapter 9; 0: every block keeps its dense MLP)")
      .option("top-k", "2", "experts each token is sent to (at most --n-experts)")
      .option("moe-every", "1",
              "every K-th block is an MoE block (blocks K-1, 2K-1, ...; 1: all of them)")
      .option("capacity-factor", "0",
              "each expert takes ceil(factor x tokens x top-k / n-experts) of a rank's "
              "assignments, dropping the rest (they pass on the residual); 0: no limit, "
              "nothing dropped")
      .option("drop-policy", "probability",
              "probability|position: which assignments an expert over capacity keeps (the most "
              "probable, or the earliest tokens)")
      .option("moe-gates", "normalized",
              "normalized|softmax: the k gates renormalised to sum to 1 (Mixtral, DeepSeek-V3), "
              "or the router's softmax probabilities themselves (Switch, GShard)")
      .option("aux-loss-coef", "0", "Switch/GShard load-balancing loss coefficient (1e-2)")
      .option("z-loss-coef", "0", "router z-loss coefficient (ST-MoE: 1e-3)")
      .option("expert-bias-rate", "0",
              "DeepSeek-V3's auxiliary-loss-free balancing: the expert bias's step (0: off)")
      .option("ep", "1",
              "expert-parallel degree: the experts sharded over ep ranks borrowed from dp x cp")
      .option("moe-dispatch", "all-to-all",
              "all-to-all|all-gather: how tokens reach their experts' ranks over ep");
}

void read_moe(const ArgParser& a, TrainerConfig& c) {
  const std::int64_t experts = a.get_int("n-experts");
  check_range(experts >= 0 && experts <= 4096,
              "--n-experts " + num(experts) + " is not an expert count in [0, 4096]");
  c.moe.n_experts = static_cast<int>(experts);
  const std::int64_t k = a.get_int("top-k");
  check_range(k >= 1 && k <= 4096, "--top-k " + num(k) + " is not in [1, 4096]");
  c.moe.top_k = static_cast<int>(k);
  const std::int64_t every = a.get_int("moe-every");
  check_range(every >= 1 && every <= 1 << 20, "--moe-every " + num(every) + " must be >= 1");
  c.moe_every = static_cast<int>(every);
  c.moe.capacity_factor = a.get_double("capacity-factor");
  c.moe.drop_policy = a.get_choice("drop-policy", {"probability", "position"}) == "position"
                          ? ch09::DropPolicy::kPosition
                          : ch09::DropPolicy::kProbability;
  c.moe.normalize_gates = a.get_choice("moe-gates", {"normalized", "softmax"}) == "normalized";
  c.moe.aux_loss_coef = a.get_double("aux-loss-coef");
  c.moe.z_loss_coef = a.get_double("z-loss-coef");
  c.moe.bias_update_rate = a.get_double("expert-bias-rate");
  const std::int64_t ep = a.get_int("ep");
  check_range(ep >= 1 && ep <= 1024, "--ep " + num(ep) + " is not a rank count");
  c.ep = static_cast<int>(ep);
  c.moe_dispatch = a.get_choice("moe-dispatch", {"all-to-all", "all-gather"}) == "all-gather"
                       ? ch09::DispatchKind::kAllGather
                       : ch09::DispatchKind::kAllToAll;
}

// Chapter 9's MoE blocks: what the flags alone decide (the layout's rules, ep dividing the
// experts and dp x cp and the dimensions not supported yet, are mesh rules). Refused before
// any work: top-k above the experts, a capacity below one token for a rank's micro-batch, and
// what the trainer does not run with MoE blocks yet, each named.
void validate_moe(const TrainerConfig& c) {
  if (!c.uses_moe()) return;
  const std::string k = "--top-k " + num(static_cast<std::int64_t>(c.moe.top_k));
  check_range(c.moe.top_k <= c.moe.n_experts,
              k + " is above --n-experts " + num(static_cast<std::int64_t>(c.moe.n_experts)) +
                  ": a token cannot choose more experts than there are");
  for (const auto& [flag, v] : {std::pair<const char*, double>{"capacity-factor",
                                                               c.moe.capacity_factor},
                                {"aux-loss-coef", c.moe.aux_loss_coef},
                                {"z-loss-coef", c.moe.z_loss_coef},
                                {"expert-bias-rate", c.moe.bias_update_rate}}) {
    check_range(std::isfinite(v) && v >= 0,
                std::string("--") + flag + " " + num(v) + " must be finite and >= 0");
  }
  check_range(c.moe_every <= c.model.n_layer,
              "--moe-every " + num(static_cast<std::int64_t>(c.moe_every)) + " with " +
                  num(c.model.n_layer) + " blocks: no block would be an MoE block");
  if (c.moe.capacity_factor > 0) {
    // Capacity is counted on each rank's tokens of a micro-batch (Switch eq. 3).
    const std::int64_t tokens = c.batch * c.seq / std::max(1, c.cp);
    const double share = c.moe.capacity_factor * double(tokens) * c.moe.top_k / c.moe.n_experts;
    check_range(share >= 1, "--capacity-factor " + num(c.moe.capacity_factor) +
                                " gives each expert a capacity of " + num(share) +
                                " tokens (factor x " + num(tokens) + " tokens x " + k.substr(2) +
                                " / experts): below one token");
  }
  const auto unsupported = [](bool ok, const std::string& what) {
    check_range(ok, "--n-experts with " + what + ": not supported with MoE blocks yet");
  };
  unsupported(!c.fp8,
              "--dtype fp8 (the experts' grouped GEMMs keep no FP8 scaling state: chapter 3's "
              "scalers are the dense blocks'; use bf16)");
  unsupported(!c.recompute, "--recompute (a recomputed forward would route again)");
  unsupported(c.save.empty(), "--save (a Hugging Face GPT-2 directory has no experts)");
  unsupported(c.init_from.empty(), "--init-from (a GPT-2 directory has no experts)");
  unsupported(!c.offload_optimizer, "--offload-optimizer");
}

// train_gpt's log: the MoE blocks, their balancing and their expert parallelism, as a
// second line of the model's.
std::string moe_log_line(const TrainerConfig& c) {
  if (!c.uses_moe()) return "";
  std::int64_t blocks = 0;
  for (std::int64_t l = 0; l < c.model.n_layer; ++l) blocks += MoeBlocks::is_moe_block(c, l);
  const ch09::MoeConfig& m = c.moe;
  const std::string capacity =
      m.capacity_factor > 0
          ? fmt("capacity factor %g, dropping by %s", m.capacity_factor,
                 ch09::drop_policy_name(m.drop_policy).c_str())
          : std::string("no capacity limit (nothing dropped)");
  // Every MoE block's router and experts (the blocks' own MLP tensors, counted above, stay
  // in the registry unused).
  const double C = static_cast<double>(c.model.n_embd);
  const double params = static_cast<double>(blocks) * m.n_experts * (C + 8 * C * C + 5 * C);
  return fmt(
      "\nmoe: %lld of %lld blocks, %d experts of the MLP's shape (%.2fM parameters with the "
      "routers), top-%d (%s gates), %s | aux loss %g, z-loss %g, expert bias rate %g | ep %d "
      "(%s), edp %d",
      static_cast<long long>(blocks), static_cast<long long>(c.model.n_layer), m.n_experts,
      params / 1e6, m.top_k, m.normalize_gates ? "normalized" : "softmax", capacity.c_str(),
      m.aux_loss_coef, m.z_loss_coef, m.bias_update_rate, c.ep,
      ch09::dispatch_name(c.moe_dispatch), c.dp * c.cp / c.ep);
}

}  // namespace mixpar::ch08
