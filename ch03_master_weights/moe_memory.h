// The memory of Mixture-of-Experts blocks (chapter 9), as arithmetic on the flags train_gpt
// takes (--n-experts --top-k --moe-every --capacity-factor --ep): chapter 3 cannot include
// chapter 9, so this file counts what ch08_full_3d/moe_blocks.h and ch09's MoeLayer allocate.
//
//   parameters   per MoE block the router [C, E] and this ep rank's E / ep experts, each of
//                GPT-2's MLP shape (c_fc C x 4C + 4C, c_proj 4C x C + C): 8C^2 + 5C. The
//                router and the experts are FP32 whatever the dtype (4 + 4 + 8 bytes: no master
//                copy; a 16-bit run rounds a working copy of an expert's weights per use, not
//                billed: transient). Both are replicated over tp (every tp rank runs the layer
//                on the same tokens).
//   ZeRO         stages 1 and 2 shard the experts' masters and AdamW moments over edp =
//                dp / ep, the ranks holding the same experts (each expert tensor split on its
//                own: ceil(n / edp) elements on the largest rank); the router's stay whole,
//                and so do the expert gradients (train_gpt keeps them whole under ZeRO-2).
//                Stage 3 also shards the expert parameters and gradients over edp, as
//                train_gpt's ZeRO-3 holds them between steps.
//   activations  FP32, one micro-batch of T = B s tokens per block: the router's logits and
//                probabilities 2 T E (and the input's FP32 copy T C unless the run is fp32,
//                where the router reads ln_2's output itself), the experts' input and output
//                rows 2 Ne C and their GELU input and output 2 Ne 4C, and with ep > 1 the
//                returned rows at the token's rank N C. The dense block's own buffers are
//                billed as before (GPT-2's block keeps them).
//   dispatch     the all-to-all's send and receive buffers of one block, N C and Ne C FP32,
//                transient (one block at a time).
// N is the rows a rank sends (its kept assignments), Ne the rows its experts run. With a
// capacity factor each expert takes at most cap = ceil(f T k / E) of a rank's assignments:
// N <= min(T k, E cap), Ne <= min(ep T min(k, El), ep El cap). Without one nothing is dropped:
// N = T k, and Ne is billed at its worst case ep T min(k, El) (every rank's tokens choosing
// this rank's experts); balanced routing runs T k.
#pragma once

#include <cstdint>

#include "ch03_master_weights/memory_calculator.h"

namespace mixpar::mem {

// InputError naming what is wrong: experts without a shape, ep not dividing the experts or
// dp, top-k above the experts, moe_every above the layers, a capacity under one token.
void validate_moe(const MoeShape& m, const GptShape& s, const Layout& l);

// MoE blocks among layers [first, end): layer l is one when (l + 1) % moe_every == 0.
std::int64_t moe_blocks_in(std::int64_t first, std::int64_t end, std::int64_t moe_every);

// One block's parameters on one rank: the router C E, and El experts' El (8C^2 + 5C).
std::int64_t moe_router_params(std::int64_t n_embd, const MoeShape& m);
std::int64_t moe_expert_params(std::int64_t n_embd, const MoeShape& m);

// Model states of `blocks` MoE blocks on one rank (FP32 in every precision), the experts'
// sharded over edp as above.
ModelStates moe_model_states(std::int64_t n_embd, const MoeShape& m, std::int64_t blocks,
                             Optimizer o, int zero_stage, std::int64_t edp);

// The capacity of each expert for `tokens` of a rank (chapter 9's expert_capacity): -1
// without a factor; at most `tokens` (an expert takes each token once at most).
std::int64_t moe_capacity(const MoeShape& m, std::int64_t tokens);

// Activation bytes one MoE block keeps for backward, for `tokens` tokens of which this rank
// sends `rows_sent` rows and its experts run `rows_run` (FP32; see above).
std::int64_t moe_activation_bytes(std::int64_t n_embd, const MoeShape& m, std::int64_t tokens,
                                  std::int64_t rows_sent, std::int64_t rows_run, Precision p);

// The MoE part of the bill of a device with `blocks` MoE blocks whose activations are held
// for `held` micro-batches each (tokens: B s of the micro-batch).
MoeBill moe_bill(const GptShape& s, const MoeShape& m, std::int64_t blocks, std::int64_t held,
                 Precision p, Optimizer o, const Layout& l);

}  // namespace mixpar::mem
