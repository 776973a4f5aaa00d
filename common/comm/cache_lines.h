// Byte buffers that start on a cache line (internal to the local backend). Bytes another core
// reads are fetched a line at a time: a buffer at operator new[]'s 16-byte alignment spans one
// line more than its bytes need, and a reader that finds where to read from what the first
// line says fetches that extra line only after the first (ch04_ddp/PERFORMANCE.md, "Trips
// between cores").
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace mixpar::local {

inline constexpr std::size_t kCacheLine = 64;

struct FreeLines {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kCacheLine}); }
};
using LineBytes = std::unique_ptr<std::byte[], FreeLines>;

// `bytes` uninitialised bytes from a cache line's start.
inline LineBytes allocate_lines(std::size_t bytes) {
  return LineBytes(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{kCacheLine})));
}

}  // namespace mixpar::local
