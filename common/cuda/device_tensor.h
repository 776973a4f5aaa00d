// DeviceTensor: a contiguous row-major block of one DType in GPU memory, drawn from the caching
// allocator and charged to a MemoryLedger under a MemCategory (like common/tensor's Tensor,
// whose CUDA storage is a plain cudaMalloc each time). Views share the block. Copies to and
// from the host take a stream; to_host() waits for it. DeviceIds: token ids on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/caching_allocator.h"
#include "tensor/tensor.h"

namespace mixpar::cuda {

// Bytes from a CachingAllocator, returned to it when the last handle goes (the allocator
// orders their reuse after the work of `stream`, their last stream: caching_allocator.h).
struct DeviceBlock {
  DeviceBlock(std::size_t bytes, MemCategory category, CachingAllocator& allocator,
              MemoryLedger& ledger, cudaStream_t stream = nullptr);
  ~DeviceBlock();  // never throws; an allocator error is reported on stderr
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;

  CachingAllocator* allocator;
  void* ptr;
  std::size_t bytes;
  MemCategory category;
};

class DeviceTensor {
 public:
  DeviceTensor() = default;  // undefined

  // Uninitialised. allocator/ledger default to device_allocator() and current_ledger();
  // `stream` is the stream its work runs on (nullptr: the legacy default stream).
  static DeviceTensor empty(Shape shape, DType dtype, MemCategory category = MemCategory::kOther,
                            CachingAllocator* allocator = nullptr, MemoryLedger* ledger = nullptr,
                            cudaStream_t stream = nullptr);
  // A copy of a CPU tensor, same shape and dtype.
  static DeviceTensor from_host(const Tensor& host, MemCategory category = MemCategory::kOther,
                                cudaStream_t stream = nullptr);

  bool defined() const { return block_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const;  // negative i counts from the end
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  MemCategory category() const;

  void* data() const;
  float* f32() const;  // data() checked to be f32
  // The block's work runs on `stream` from now on (its views' too): freeing it records the
  // allocator's event there. Call it once `stream` is ordered after the work so far.
  void mark_used_on(cudaStream_t stream) const;
  double* f64() const;

  DeviceTensor view(Shape shape) const;                               // same elements
  DeviceTensor flat_slice(std::int64_t begin, std::int64_t count) const;  // 1-D
  DeviceTensor rows(std::int64_t begin, std::int64_t count) const;        // along dim 0

  // host (any dtype, same numel) -> this, converted on the host to this dtype first.
  void copy_from_host(const Tensor& host, cudaStream_t stream = nullptr);
  // device -> device, same numel. Another dtype converts on the device with convert_on_device
  // (numerics/convert_cuda.h: the CUDA intrinsics, bit-identical to the host conversions),
  // which runs on the legacy stream and returns when done.
  void copy_from(const DeviceTensor& src, cudaStream_t stream = nullptr);
  // A CPU tensor of this shape and dtype (charged to the current ledger); waits for `stream`.
  Tensor to_host(cudaStream_t stream = nullptr) const;
  std::vector<float> to_floats(cudaStream_t stream = nullptr) const;

  void fill_bytes(int byte, cudaStream_t stream = nullptr);
  void zero(cudaStream_t stream = nullptr) { fill_bytes(0, stream); }
  // Every byte 0xFF: NaN in f32, f16 and bf16, so a kernel that leaves an element unwritten
  // fails any comparison (tests poison outputs before each run).
  void poison(cudaStream_t stream = nullptr) { fill_bytes(0xFF, stream); }

 private:
  std::shared_ptr<DeviceBlock> block_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

// Token ids (int32) on the device.
class DeviceIds {
 public:
  DeviceIds() = default;
  static DeviceIds upload(std::span<const std::int32_t> ids, cudaStream_t stream = nullptr,
                          MemCategory category = MemCategory::kOther);
  const std::int32_t* data() const;
  std::int64_t size() const { return size_; }

 private:
  std::shared_ptr<DeviceBlock> block_;
  std::int64_t size_ = 0;
};

// t becomes an uninitialised device tensor of this shape, dtype and category unless it already
// is one (freed first, so the old and new buffer are never both on the ledger).
void ensure_device_tensor(DeviceTensor& t, const Shape& shape, DType dtype, MemCategory category,
                          cudaStream_t stream = nullptr);

// A MemoryLedger that is this thread's current ledger for its lifetime (LedgerScope) and that,
// at its end, detaches the device blocks still charged to it (CachingAllocator::forget_ledger,
// on device_allocator()): a DeviceTensor that outlives it then frees without touching a dead
// ledger. How many blocks outlived it is printed on stderr (a leak the owner should see).
class ScopedDeviceLedger {
 public:
  explicit ScopedDeviceLedger(int rank = 0);
  ~ScopedDeviceLedger();
  ScopedDeviceLedger(const ScopedDeviceLedger&) = delete;
  ScopedDeviceLedger& operator=(const ScopedDeviceLedger&) = delete;
  MemoryLedger& get() { return ledger_; }
  MemoryLedger* operator->() { return &ledger_; }

 private:
  MemoryLedger ledger_;
  LedgerScope scope_;
};

}  // namespace mixpar::cuda
