// control.h over the float collectives: flags and bytes each travel as an FP32 element holding
// a small whole number (exact, whatever a reduction does to it); 64-bit values as the bytes of
// f64 elements, which all_gather copies without computing on them.
#include "comm/control.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tensor/tensor.h"

namespace mixpar {

int lowest_rank_where(Communicator& comm, bool mine) {
  const int n = comm.size();
  Tensor flag = Tensor::empty({1}, DType::kF32, MemCategory::kCommBuffers);
  Tensor all = Tensor::empty({n}, DType::kF32, MemCategory::kCommBuffers);
  flag.data_as<float>()[0] = mine ? 1.0f : 0.0f;
  comm.all_gather(flag, all);
  for (int r = 0; r < n; ++r) {
    if (all.data_as<float>()[r] != 0.0f) return r;
  }
  return -1;
}

std::string broadcast_text(Communicator& comm, int root, const std::string& text) {
  std::string sent = text;
  if (sent.size() > kMaxControlText) sent = sent.substr(0, kMaxControlText - 3) + "...";
  Tensor length = Tensor::empty({1}, DType::kF32, MemCategory::kCommBuffers);
  length.data_as<float>()[0] = static_cast<float>(sent.size());
  comm.broadcast(length, root);
  const auto n = static_cast<std::int64_t>(length.data_as<float>()[0]);
  if (n == 0) return {};
  Tensor bytes = Tensor::empty({n}, DType::kF32, MemCategory::kCommBuffers);
  float* b = bytes.data_as<float>();
  if (comm.rank() == root) {
    for (std::int64_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(sent[std::size_t(i)]);
  }
  comm.broadcast(bytes, root);
  std::string out(static_cast<std::size_t>(n), '\0');
  for (std::int64_t i = 0; i < n; ++i) {
    out[std::size_t(i)] = static_cast<char>(static_cast<unsigned char>(std::clamp(b[i], 0.0f, 255.0f)));
  }
  return out;
}

std::vector<std::string> gather_text(Communicator& comm, const std::string& mine) {
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.push_back(broadcast_text(comm, r, mine));
  return out;
}

bool all_true(Communicator& comm, bool mine) {
  Tensor no = Tensor::empty({1}, DType::kF32, MemCategory::kCommBuffers);
  no.data_as<float>()[0] = mine ? 0.0f : 1.0f;
  comm.all_reduce(no, ReduceOp::kMax);
  return no.data_as<float>()[0] == 0.0f;
}

std::vector<std::uint64_t> gather_u64(Communicator& comm, std::span<const std::uint64_t> mine) {
  static_assert(sizeof(double) == sizeof(std::uint64_t));
  const auto n = static_cast<std::int64_t>(mine.size());
  std::vector<std::uint64_t> out(static_cast<std::size_t>(comm.size() * n));
  if (n == 0) return out;
  // all_gather copies elements and never computes on them (communicator.h), so a value's eight
  // bytes travel in an f64 element's eight bytes unchanged: 8 bytes a value on the wire.
  Tensor in = Tensor::empty({n}, DType::kF64, MemCategory::kCommBuffers);
  Tensor all = Tensor::empty({comm.size() * n}, DType::kF64, MemCategory::kCommBuffers);
  std::memcpy(in.data(), mine.data(), mine.size_bytes());
  comm.all_gather(in, all);
  std::memcpy(out.data(), all.data(), out.size() * sizeof(std::uint64_t));
  return out;
}

bool all_agree(Communicator& comm, std::uint64_t mine) {
  const std::vector<std::uint64_t> all = gather_u64(comm, std::span(&mine, 1));
  return std::all_of(all.begin(), all.end(), [&](std::uint64_t v) { return v == all.front(); });
}

}  // namespace mixpar
