#include "ch07_pipeline/model_chunks.h"

#include <string>

#include "util/errors.h"

namespace mixpar::ch07 {

std::vector<GptStage> rank_chunk_stages(const GptConfig& config, int rank, int pp,
                                        int virtual_stages, Placement placement) {
  if (pp < 1 || virtual_stages < 1 || rank < 0 || rank >= pp) {
    throw InputError("pipeline: rank " + std::to_string(rank) + " of " + std::to_string(pp) +
                     " with " + std::to_string(virtual_stages) + " virtual stages does not exist");
  }
  const PipelineLayout l{pp, 1, virtual_stages, placement};
  std::vector<GptStage> out;
  for (int c = 0; c < virtual_stages; ++c) {
    out.push_back(gpt_stage(config, l.stage_of(rank, c), l.stages()));
  }
  return out;
}

ParamRegistry make_chunks_registry(const GptConfig& config, std::span<const GptStage> chunks,
                                   const TensorShard& tp) {
  if (chunks.size() == 1) return make_gpt2_registry(config, chunks.front(), tp);
  ParamRegistry r;
  for (const GptStage& s : chunks) {
    const ParamRegistry chunk = make_gpt2_registry(config, s, tp);
    for (const ParamEntry& e : chunk.entries()) {
      if (e.holding.tied_copy && r.contains(e.name)) continue;
      r.add(e.name, e.shape, e.weight_decay, e.init, e.init_std, e.holding, e.init_offset)
          .init_rows = e.init_rows;
    }
  }
  return r;
}

}  // namespace mixpar::ch07
