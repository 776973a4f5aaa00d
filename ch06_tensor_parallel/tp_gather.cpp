#include "ch06_tensor_parallel/tp_gather.h"

#include <stdexcept>
#include <string>

namespace mixpar::ch06 {

std::vector<NamedTensor> gather_full_tensors(Communicator& tp, const ParamRegistry& registry,
                                             std::span<const Tensor> shards,
                                             std::int64_t vocab_size) {
  const auto entries = registry.entries();
  if (shards.size() != entries.size()) {
    throw std::invalid_argument("gather_full_tensors: " + std::to_string(shards.size()) +
                                " tensors for " + std::to_string(entries.size()) + " entries");
  }
  std::vector<NamedTensor> out;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const ParamEntry& e = entries[i];
    Tensor full = Tensor::empty(e.shape, DType::kF32, MemCategory::kOther);
    if (e.holding.split == ParamSplit::kReplicated || e.holding.num_shards == 1) {
      full.copy_from(shards[i]);
    } else {
      // Every shard has the same number of elements (the vocabulary is padded): one gather.
      const std::int64_t n = shards[i].numel();
      Tensor mine = shards[i].to(DType::kF32).with_category(MemCategory::kCommBuffers);
      Tensor all = Tensor::empty({n * tp.size()}, DType::kF32, MemCategory::kCommBuffers);
      tp.all_gather(mine.view({n}), all);
      for (int r = 0; r < tp.size(); ++r) {
        ParamHolding h = e.holding;
        h.shard = r;
        std::int64_t k = r * n;
        for (const ElementRange& run : held_elements(e.shape, h)) {
          Tensor dst = full.flat_slice(run.begin, run.count);
          dst.copy_from(all.flat_slice(k, run.count));
          k += run.count;
        }
      }
    }
    if (e.name == "wte.weight" && e.shape.front() != vocab_size) {  // drop the padding rows
      const std::int64_t C = e.shape.back();
      full = full.flat_slice(0, vocab_size * C).view({vocab_size, C}).clone();
    }
    out.push_back({e.name, full});
  }
  return out;
}

}  // namespace mixpar::ch06
