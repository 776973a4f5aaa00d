// EpilogueStats: counts per epilogue, the first decline kept verbatim.
#include "cuda/epilogue_stats.h"

#include <numeric>
#include <stdexcept>

namespace mixpar::cuda {

namespace {
std::size_t index_of(Epilogue e) {
  const auto i = static_cast<std::size_t>(e);
  if (i >= static_cast<std::size_t>(kEpilogueCount)) {
    throw std::invalid_argument("EpilogueStats: unknown epilogue " + std::to_string(i));
  }
  return i;
}
}  // namespace

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return "none";
    case Epilogue::kBias: return "BIAS";
    case Epilogue::kGeluAuxBias: return "GELU_AUX_BIAS";
    case Epilogue::kDGeluBGrad: return "DGELU_BGRAD";
    case Epilogue::kBiasGradOfB: return "BGRADA";
  }
  return "?";
}

bool epilogue_expected(Epilogue e, DType in, int sm_major) {
  if (e == Epilogue::kNone || sm_major < 8) return false;
  if (in == DType::kF16 || in == DType::kBF16) return true;
  return in == DType::kF32 && e == Epilogue::kBias;
}

std::int64_t EpilogueStats::Counts::total_fused() const {
  return std::accumulate(fused.begin(), fused.end(), std::int64_t{0});
}

std::int64_t EpilogueStats::Counts::total_declined() const {
  return std::accumulate(declined.begin(), declined.end(), std::int64_t{0});
}

void EpilogueStats::on_fused(Epilogue e) {
  const std::size_t i = index_of(e);
  std::lock_guard<std::mutex> lock(mu_);
  ++c_.fused[i];
}

bool EpilogueStats::on_declined(Epilogue e, const std::string& why) {
  const std::size_t i = index_of(e);
  std::lock_guard<std::mutex> lock(mu_);
  ++c_.declined[i];
  if (!c_.first_decline.empty()) return false;
  c_.first_decline = std::string(epilogue_name(e)) + ": " + why;
  return true;
}

EpilogueStats::Counts EpilogueStats::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return c_;
}

void EpilogueStats::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  c_ = Counts{};
}

}  // namespace mixpar::cuda
