#include "ch07_pipeline/stage_gather.h"

#include <map>
#include <stdexcept>
#include <string>

#include "ch07_pipeline/model_chunks.h"

namespace mixpar::ch07 {

std::vector<NamedTensor> gather_stages(Communicator& pp, const GptConfig& config,
                                       const ParamRegistry& registry,
                                       std::span<const Tensor> values, int virtual_stages,
                                       Placement placement) {
  const auto entries = registry.entries();
  if (values.size() != entries.size()) {
    throw std::invalid_argument("gather_stages: " + std::to_string(values.size()) +
                                " tensors for " + std::to_string(entries.size()) + " entries");
  }
  const int stages = pp.size(), me = pp.rank();
  constexpr int kGatherTag = 17;
  if (me != 0) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].holding.tied_copy) continue;
      Tensor out = Tensor::empty(values[i].shape(), DType::kF32, MemCategory::kCommBuffers);
      out.copy_from(values[i]);
      pp.send(out, 0, kGatherTag);
    }
    return {};
  }
  std::map<std::string, Tensor> by_name;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    Tensor t = Tensor::empty(values[i].shape(), DType::kF32, MemCategory::kOther);
    t.copy_from(values[i]);
    by_name[entries[i].name] = std::move(t);
  }
  // Rank s's registry (its chunks') says what it sends, and in which order.
  for (int s = 1; s < stages; ++s) {
    const ParamRegistry theirs =
        make_chunks_registry(config,
                             rank_chunk_stages(config, s, stages, virtual_stages, placement));
    for (const ParamEntry& e : theirs.entries()) {
      if (e.holding.tied_copy) continue;
      Tensor t = Tensor::empty(e.shape, DType::kF32, MemCategory::kOther);
      pp.recv(t, s, kGatherTag);
      by_name[e.name] = std::move(t);
    }
  }
  std::vector<NamedTensor> out;
  const ParamRegistry whole = make_gpt2_registry(config);
  for (const ParamEntry& e : whole.entries()) {
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) throw std::logic_error("gather_stages: no stage holds " + e.name);
    out.push_back({e.name, it->second});
  }
  return out;
}

}  // namespace mixpar::ch07
