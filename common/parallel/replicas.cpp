// The replica hash travels as the 8 bytes of an f64 element (all_gather moves bits, it does
// not compute on them), so every backend can carry it.
#include "parallel/replicas.h"

#include <cstdio>
#include <cstring>

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

std::uint64_t weights_hash(const Tensor& t) {
  const Tensor host = t.is_cpu() ? t : t.to_device(Device::kCPU);
  const auto* p = static_cast<const unsigned char*>(host.data());
  const std::size_t n = host.nbytes();
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis and prime, on 8-byte words
  constexpr std::uint64_t kPrime = 0x100000001b3ull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kPrime;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  return h;
}

ReplicaCheck check_replicas(Communicator& group, const Tensor& weights) {
  const std::uint64_t h = weights_hash(weights);
  const int n = group.size();
  Tensor mine = Tensor::empty({1}, DType::kF64, MemCategory::kCommBuffers);
  Tensor all = Tensor::empty({n}, DType::kF64, MemCategory::kCommBuffers);
  std::memcpy(mine.data(), &h, sizeof h);
  group.all_gather(mine, all);
  ReplicaCheck check;
  check.hashes.resize(static_cast<std::size_t>(n));
  std::memcpy(check.hashes.data(), all.data(), sizeof h * static_cast<std::size_t>(n));
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
