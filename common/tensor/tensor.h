// Tensor: a contiguous, row-major block of elements of one DType on one Device, owned through
// a shared Storage that was charged to a MemoryLedger under a MemCategory when allocated.
// Views (reshape, flat slices) share the storage. Math lives in common/ops; this is storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "numerics/dtype.h"
#include "numerics/formats.h"
#include "tensor/ledger.h"

namespace mixpar {

using Shape = std::vector<std::int64_t>;
std::int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[4, 256]"

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<Float8E4M3> { static constexpr DType value = DType::kE4M3; };
template <> struct DTypeOf<Float8E5M2> { static constexpr DType value = DType::kE5M2; };
template <class T> inline constexpr DType dtype_of = DTypeOf<T>::value;

// Owns bytes on one device and keeps them on the ledger until destroyed. CPU bytes allocated
// inside this thread's HostMemoryScope are billed to the ledger's host side (pinned when the
// scope says so); everything else to its device's side.
class Storage {
 public:
  Storage(std::size_t bytes, Device device, MemCategory category, MemoryLedger& ledger);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }
  MemPlace place() const { return place_; }
  bool pinned() const { return pinned_; }
  MemoryLedger& ledger() const { return *ledger_; }

  // Residency (ZeRO, chapter 5: gradients and parameters absent between their uses). release()
  // frees the bytes and credits the ledger while every handle on the storage stays valid;
  // Tensor::data() of a released storage throws naming `what`, so computing with something
  // released is a named error, never garbage. restore() allocates again (uninitialised) and
  // charges the ledger again. Both are no-ops when already in that state.
  void release(std::string what);
  void restore();
  bool resident() const { return resident_; }
  const std::string& released_what() const { return released_what_; }

 private:
  void allocate();
  void free_bytes();

  void* data_ = nullptr;
  std::size_t bytes_;
  Device device_;
  MemCategory category_;
  MemPlace place_;
  bool pinned_;
  MemoryLedger* ledger_;
  bool resident_ = true;
  std::string released_what_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // Uninitialised storage charged to `ledger` (default: this thread's current ledger).
  static Tensor empty(Shape shape, DType dtype, MemCategory category = MemCategory::kOther,
                      Device device = Device::kCPU, MemoryLedger* ledger = nullptr);
  static Tensor zeros(Shape shape, DType dtype, MemCategory category = MemCategory::kOther,
                      Device device = Device::kCPU, MemoryLedger* ledger = nullptr);
  // A CPU tensor of `dtype` holding `values` rounded to that format.
  static Tensor from_floats(std::span<const float> values, Shape shape, DType dtype = DType::kF32,
                            MemCategory category = MemCategory::kOther);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const;  // negative i counts from the end
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemCategory category() const;
  MemPlace place() const;  // the ledger side its storage is billed to
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  bool is_cpu() const { return device() == Device::kCPU; }
  // The storage's residency (Storage::release): shared by every view of it.
  bool resident() const;
  void release_storage(std::string what) const;
  void restore_storage() const;

  void* data() const;
  // Typed pointer; throws if T does not match the dtype (CPU or device pointer alike).
  template <class T> T* data_as() const {
    check_dtype(dtype_of<T>, "data_as");
    return static_cast<T*>(data());
  }
  template <class T> std::span<T> span() const {
    return {data_as<T>(), static_cast<std::size_t>(numel_)};
  }

  // Same storage, new shape with the same number of elements.
  Tensor view(Shape shape) const;
  // Same storage, elements [begin, begin + count) of the flat tensor, as 1-D.
  Tensor flat_slice(std::int64_t begin, std::int64_t count) const;
  // Rows [begin, begin + count) along dimension 0 (shares storage).
  Tensor rows(std::int64_t begin, std::int64_t count) const;

  // New tensors (own storage; category defaults to this tensor's).
  Tensor clone() const;
  Tensor to(DType dtype, Saturation sat = Saturation::kSatFinite) const;
  Tensor to_device(Device device) const;
  Tensor with_category(MemCategory category) const;  // a copy charged under another category

  // Copies src into this tensor: same numel, any dtype (rounded), any device.
  void copy_from(const Tensor& src, Saturation sat = Saturation::kSatFinite);
  void fill(float value);
  void zero();
  std::vector<float> to_floats() const;  // any device, any dtype
  float item() const;                   // the single element as float

 private:
  void check_dtype(DType want, const char* what) const;
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace mixpar
