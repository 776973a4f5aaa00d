// Each replica's 64-bit weight hash is gathered whole from every rank (comm/control.h).
#include "parallel/replicas.h"

#include <cstdio>
#include <cstring>

#include "comm/control.h"

namespace mixpar {
namespace {

std::string hex(std::uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// "rank 1", "ranks 1, 3"
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

namespace {

// The element's bits with every NaN as one pattern (the positive quiet NaN): replicas that both
// hold NaN at an element agree there, whatever sign and payload the arithmetic that made each
// NaN left (x86 propagates the first operand's NaN, and which operand is first is the
// compiler's choice: GCC and clang builds of chapter 4's lesson made different NaNs from the
// same values).
template <class Bits>
Bits canonical(Bits b, Bits exp_mask, Bits frac_mask, Bits quiet) {
  return (b & exp_mask) == exp_mask && (b & frac_mask) != 0 ? quiet : b;
}

template <class Bits, class F>
std::uint64_t fnv_elements(const unsigned char* p, std::size_t n, F&& canon) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis and prime, per element
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  for (std::size_t i = 0; i + sizeof(Bits) <= n; i += sizeof(Bits)) {
    Bits b;
    std::memcpy(&b, p + i, sizeof b);
    h = (h ^ static_cast<std::uint64_t>(canon(b))) * kPrime;
  }
  return h;
}

}  // namespace

std::uint64_t weights_hash(const Tensor& t) {
  const Tensor host = t.is_cpu() ? t : t.to_device(Device::kCPU);
  const auto* p = static_cast<const unsigned char*>(host.data());
  const std::size_t n = host.nbytes();
  switch (host.dtype()) {
    case DType::kF32:
      return fnv_elements<std::uint32_t>(p, n, [](std::uint32_t b) {
        return canonical<std::uint32_t>(b, 0x7f800000u, 0x007fffffu, 0x7fc00000u);
      });
    case DType::kF64:
      return fnv_elements<std::uint64_t>(p, n, [](std::uint64_t b) {
        return canonical<std::uint64_t>(b, 0x7ff0000000000000ull, 0x000fffffffffffffull,
                                        0x7ff8000000000000ull);
      });
    case DType::kF16:
      return fnv_elements<std::uint16_t>(p, n, [](std::uint16_t b) {
        return canonical<std::uint16_t>(b, 0x7c00, 0x03ff, 0x7e00);
      });
    case DType::kBF16:
      return fnv_elements<std::uint16_t>(p, n, [](std::uint16_t b) {
        return canonical<std::uint16_t>(b, 0x7f80, 0x007f, 0x7fc0);
      });
    default:  // FP8 weights are never trained here: their bytes as they are
      return fnv_elements<std::uint8_t>(p, n, [](std::uint8_t b) { return b; });
  }
}

ReplicaCheck check_replicas(Communicator& group, const Tensor& weights) {
  const std::uint64_t h = weights_hash(weights);
  const int n = group.size();
  ReplicaCheck check;
  check.hashes = gather_u64(group, std::span(&h, 1));
  std::vector<int> differ;
  for (int r = 1; r < n; ++r) {
    if (check.hashes[std::size_t(r)] != check.hashes[0]) differ.push_back(r);
  }
  check.ok = differ.empty();
  if (!check.ok) {
    check.message = "replica check: " + rank_list(differ) +
                    " hold weights different from rank 0's (hash " + hex(check.hashes[0]) +
                    " on rank 0, " + hex(check.hashes[std::size_t(differ[0])]) + " on rank " +
                    std::to_string(differ[0]) + ")";
  }
  return check;
}

void verify_replicas(Communicator& group, const Tensor& weights) {
  const ReplicaCheck c = check_replicas(group, weights);
  if (!c.ok) throw ReplicaMismatch(c.message);
}

void sync_initial_weights(Communicator& group, Tensor weights, InitSync how) {
  if (how == InitSync::kBroadcast) group.broadcast(weights, 0);  // a handle: writes the weights
}

}  // namespace mixpar
