// The model chunks of one rank of an interleaved pipeline (Narayanan et al. 2021, section
// 2.2.2): with v virtual stages per rank the blocks are split over p v stages by gpt_stage's
// rule, and rank r runs chunk c = virtual stage c p + r (Megatron's assignment), so rank 0 holds
// the embedding in its first chunk and rank p - 1 the final LayerNorm, the tied head and the
// loss in its last. Each chunk is a GptModel of its own (its activation slots, its forward and
// backward); their parameters live in one registry, chunk after chunk, so that the optimizer,
// the gradient sync (one flat buffer, chapter 4's buckets or chapter 5's ZeRO partition), the
// count-once norm and --save see one set of parameters per rank, as with one chunk.
#pragma once

#include <span>
#include <vector>

#include "ch07_pipeline/pipeline_schedule.h"
#include "model/gpt_params.h"

namespace mixpar::ch07 {

// The stages rank `rank` of a `pp`-rank pipeline runs, chunk by chunk: gpt_stage(config,
// stage_of(rank, c), pp v) for c = 0 .. v - 1 of the placement's layout (loop: c pp + rank; V:
// rank and 2 pp - 1 - rank). v = 1: the one stage gpt_stage(config, rank, pp).
// InputError naming the numbers when pp v > n_layer.
std::vector<GptStage> rank_chunk_stages(const GptConfig& config, int rank, int pp,
                                        int virtual_stages,
                                        Placement placement = Placement::kLoop);

// One registry of the chunks' parameters, in chunk order, each as make_gpt2_registry of its
// stage registers it: its Hugging Face name (global names: "h.5.mlp.c_fc.weight"), its holding
// (stage = its virtual stage; the tied wte of the last chunk of rank p - 1 a tied_copy) and the
// whole model's init offsets, so the registry initialised from a seed holds the very values of
// the same parameters of one device. Registered, not allocated. One chunk: the stage's registry.
// A tied copy of a parameter the registry already holds (the V's rank 0: the head's wte, whose
// owner is the embedding of its chunk 0) is not registered again: both chunks use the one
// tensor (GptOptions::wte_grad_shared), as one device does.
ParamRegistry make_chunks_registry(const GptConfig& config, std::span<const GptStage> chunks,
                                   const TensorShard& tp = {});

}  // namespace mixpar::ch07
