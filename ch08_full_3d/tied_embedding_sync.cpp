#include "tied_embedding_sync.h"

#include <stdexcept>
#include <utility>

#include "trace/chrome_trace.h"

namespace mixpar::ch08 {
namespace {

std::size_t index_of_wte(const ParamRegistry& registry) {
  const auto entries = registry.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].name == "wte.weight") return i;
  }
  throw std::invalid_argument("TiedEmbeddingFirst: this stage holds no wte.weight");
}

}  // namespace

TiedEmbeddingFirst::TiedEmbeddingFirst(std::unique_ptr<GradSync> inner, ParamRegistry& registry,
                                       Communicator& embedding, int trace_rank)
    : ForwardingGradSync(std::move(inner)),
      registry_(registry),
      embedding_(embedding),
      wte_(index_of_wte(registry)),
      trace_rank_(trace_rank) {}

std::string TiedEmbeddingFirst::describe() const {
  return "the tied wte's two stage copies summed, then " + inner().describe();
}

void TiedEmbeddingFirst::grad_ready(std::size_t entry) {
  if (entry != wte_) inner().grad_ready(entry);  // wte: released in finish()
}

double TiedEmbeddingFirst::finish() {
  const double t0 = trace_now_us();
  embedding_.all_reduce(registry_.at("wte.weight").grad, ReduceOp::kSum);
  const double dur = trace_now_us() - t0;
  seconds_ += dur * 1e-6;
  spans_.push_back({"tied wte sum", "exposed", trace_rank_, 0, t0, dur});
  inner().grad_ready(wte_);
  return dur * 1e-6 + inner().finish();
}

double TiedEmbeddingFirst::take_comm_seconds() {
  return std::exchange(seconds_, 0.0) + inner().take_comm_seconds();
}

std::vector<TraceSpan> TiedEmbeddingFirst::take_spans() {
  std::vector<TraceSpan> all = inner().take_spans();
  for (TraceSpan& s : spans_) all.push_back(std::move(s));
  spans_.clear();
  return all;
}

}  // namespace mixpar::ch08
