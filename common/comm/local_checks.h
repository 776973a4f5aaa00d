// The local backend's argument checks and byte view of a tensor, shared by its collectives
// (local_backend.cpp) and its sends and receives (local_point_to_point.cpp): internal.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "tensor/tensor.h"

namespace mixpar::local {

inline std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.data()); }

inline void require_defined(const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string(what) + ": undefined tensor");
}

inline void require_same_dtype(const Tensor& in, const Tensor& out, const char* what) {
  if (in.dtype() != out.dtype()) {
    throw std::invalid_argument(std::string(what) + ": input is " +
                                std::string(dtype_name(in.dtype())) + ", output " +
                                std::string(dtype_name(out.dtype())));
  }
}

// The receiver reads a sendrecv's send buffer while the sender's own receive writes its
// receive (or reduce) buffer, so the two must not share a byte (MPI_Sendrecv asks the same).
inline void require_disjoint(const Tensor& a, const Tensor& b, const char* what) {
  if (!a.is_cpu() || !b.is_cpu() || a.nbytes() == 0 || b.nbytes() == 0) return;
  const std::byte *a0 = bytes_of(a), *b0 = bytes_of(b);
  if (a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes()) {
    throw std::invalid_argument(std::string(what) + ": the buffer sent overlaps the buffer written");
  }
}

}  // namespace mixpar::local
