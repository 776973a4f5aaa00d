// control.h over two collectives: an all_gather of one flag per rank, and two broadcasts (the
// length, then one byte per element).
#include "comm/control.h"

#include <algorithm>
#include <cstdint>

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

}  // namespace mixpar
