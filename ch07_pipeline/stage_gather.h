// The whole model out of its pipeline stages, on the first stage: what evaluation, sampling,
// --save and --dump-logits read on rank 0 of a pipeline run (train_gpt gathers the stages
// rather than running a pipelined forward: a whole copy for the few moments it is needed).
#pragma once

#include <span>
#include <vector>

#include "ch07_pipeline/pipeline_schedule.h"
#include "comm/communicator.h"
#include "model/gpt_params.h"

namespace mixpar::ch07 {

// Collective over `pp` (rank s runs the chunks rank_chunk_stages(config, s, pp.size(),
// virtual_stages, placement): with one chunk, stage s by gpt_stage's rule): each rank sends `values` (one
// tensor per entry of its registry, make_chunks_registry's order: its FP32 masters, say) of
// the parameters it owns (the last stage's tied wte copy stays home), rank by rank to rank 0.
// Returns, on rank 0, every parameter of `config` in Hugging Face order as contiguous FP32
// tensors; nothing elsewhere.
std::vector<NamedTensor> gather_stages(Communicator& pp, const GptConfig& config,
                                       const ParamRegistry& registry,
                                       std::span<const Tensor> values, int virtual_stages = 1,
                                       Placement placement = Placement::kLoop);

}  // namespace mixpar::ch07
