// Tensor storage and copies. Every allocation goes through Storage, so it is on a ledger;
// copies across dtypes round through formats.h's convert(), across devices through device_api.
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <utility>

#include "tensor/device_api.h"

namespace mixpar {

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(s));
    if (d > 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      throw std::invalid_argument("shape " + shape_str(s) + " has more than 2^63 elements");
    }
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// CPU buffers are 64-byte aligned: a cache line, and enough for any SIMD load Eigen issues.
static constexpr std::size_t kCpuAlignment = 64;

Storage::Storage(std::size_t bytes, Device device, MemCategory category, MemoryLedger& ledger)
    : bytes_(bytes),
      device_(device),
      category_(category),
      place_(device == Device::kCPU ? current_mem_place() : MemPlace::kDevice),
      pinned_(place_ == MemPlace::kHost && current_host_pinned()),
      ledger_(&ledger) {
  allocate();
}

void Storage::allocate() {
  if (pinned_) {
    data_ = cuda_host_alloc(bytes_);
  } else if (device_ == Device::kCPU) {
    const std::size_t rounded = (bytes_ + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    data_ = rounded ? std::aligned_alloc(kCpuAlignment, rounded) : nullptr;
    if (rounded && !data_) throw std::bad_alloc();
  } else {
    data_ = cuda_malloc(bytes_);
  }
  ledger_->on_alloc(category_, device_, bytes_, place_);
}

void Storage::free_bytes() {
  if (pinned_) {
    try {
      cuda_host_free(data_);
    } catch (...) {
      // As cuda_free below: a destructor must not throw.
    }
  } else if (device_ == Device::kCPU) {
    std::free(data_);
  } else {
    try {
      cuda_free(data_);
    } catch (...) {
      // A destructor must not throw; a failed cudaFree leaves the device unusable anyway.
    }
  }
  data_ = nullptr;
  ledger_->on_free(category_, device_, bytes_, place_);
}

Storage::~Storage() {
  if (resident_) free_bytes();
}

void Storage::release(std::string what) {
  if (!resident_) return;
  free_bytes();
  resident_ = false;
  released_what_ = std::move(what);
}

void Storage::restore() {
  if (resident_) return;
  allocate();
  resident_ = true;
  released_what_.clear();
}

Tensor Tensor::empty(Shape shape, DType dtype, MemCategory category, Device device,
                     MemoryLedger* ledger) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device, category,
                                         ledger ? *ledger : current_ledger());
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, MemCategory category, Device device,
                     MemoryLedger* ledger) {
  Tensor t = empty(std::move(shape), dtype, category, device, ledger);
  t.zero();
  return t;
}

Tensor Tensor::from_floats(std::span<const float> values, Shape shape, DType dtype,
                           MemCategory category) {
  if (shape_numel(shape) != static_cast<std::int64_t>(values.size())) {
    throw std::invalid_argument("from_floats: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(shape));
  }
  Tensor t = empty(std::move(shape), dtype, category);
  convert(values.data(), DType::kF32, t.data(), dtype, values.size());
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw std::out_of_range("Tensor::dim " + std::to_string(i) + " of " + shape_str(shape_));
  return shape_[static_cast<std::size_t>(i)];
}

Device Tensor::device() const {
  if (!storage_) throw std::logic_error("undefined tensor");
  return storage_->device();
}

MemCategory Tensor::category() const {
  if (!storage_) throw std::logic_error("undefined tensor");
  return storage_->category();
}

MemPlace Tensor::place() const {
  if (!storage_) throw std::logic_error("undefined tensor");
  return storage_->place();
}

void* Tensor::data() const {
  if (!storage_) throw std::logic_error("undefined tensor");
  if (!storage_->resident()) {
    throw std::logic_error("tensor used while released: " + storage_->released_what());
  }
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

bool Tensor::resident() const { return storage_ && storage_->resident(); }

void Tensor::release_storage(std::string what) const {
  if (!storage_) throw std::logic_error("release_storage of an undefined tensor");
  storage_->release(std::move(what));
}

void Tensor::restore_storage() const {
  if (!storage_) throw std::logic_error("restore_storage of an undefined tensor");
  storage_->restore();
}

void Tensor::check_dtype(DType want, const char* what) const {
  if (dtype_ != want) {
    throw std::invalid_argument(std::string(what) + ": tensor is " + std::string(dtype_name(dtype_)) +
                                ", asked for " + std::string(dtype_name(want)));
  }
}

Tensor Tensor::view(Shape shape) const {
  if (shape_numel(shape) != numel_) {
    throw std::invalid_argument("view " + shape_str(shape) + " of " + shape_str(shape_));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::flat_slice(std::int64_t begin, std::int64_t count) const {
  // Written so that begin + count cannot overflow.
  if (begin < 0 || count < 0 || begin > numel_ || count > numel_ - begin) {
    throw std::out_of_range("flat_slice [" + std::to_string(begin) + ", +" + std::to_string(count) +
                            ") of " + std::to_string(numel_) + " elements");
  }
  Tensor t = *this;
  t.offset_bytes_ += static_cast<std::size_t>(begin) * dtype_size(dtype_);
  t.shape_ = {count};
  t.numel_ = count;
  return t;
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t count) const {
  if (ndim() == 0) throw std::invalid_argument("rows of a 0-d tensor");
  const std::int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  if (begin < 0 || count < 0 || begin > shape_[0] || count > shape_[0] - begin) {
    throw std::out_of_range("rows [" + std::to_string(begin) + ", +" + std::to_string(count) +
                            ") of " + shape_str(shape_));
  }
  Tensor t = flat_slice(begin * row, count * row);
  Shape s = shape_;
  s[0] = count;
  t.shape_ = std::move(s);
  return t;
}

Tensor Tensor::clone() const { return to(dtype_); }

Tensor Tensor::to(DType dtype, Saturation sat) const {
  Tensor t = empty(shape_, dtype, category(), device());
  t.copy_from(*this, sat);
  return t;
}

Tensor Tensor::to_device(Device device) const {
  Tensor t = empty(shape_, dtype_, category(), device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::with_category(MemCategory category) const {
  Tensor t = empty(shape_, dtype_, category, device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src, Saturation sat) {
  if (src.numel() != numel_) {
    throw std::invalid_argument("copy_from: " + shape_str(src.shape()) + " into " + shape_str(shape_));
  }
  const Device sd = src.device(), dd = device();
  if (numel_ == 0) return;  // and an empty tensor's data() may be null, which memcpy may not see
  if (sd == Device::kCPU && dd == Device::kCPU) {
    // memmove: src may be an overlapping view of the same storage (same dtype by construction,
    // as a storage never holds two dtypes).
    if (src.dtype() == dtype_) std::memmove(data(), src.data(), nbytes());
    else convert(src.data(), src.dtype(), data(), dtype_, static_cast<std::size_t>(numel_), sat);
    return;
  }
  // Device paths: same dtype moves bytes; a dtype change goes through a host staging copy
  // (the GPU conversion kernels live in the CUDA engine and are tested against this path).
  if (src.dtype() == dtype_) {
    const CopyKind kind = sd == Device::kCPU   ? CopyKind::kHostToDevice
                          : dd == Device::kCPU ? CopyKind::kDeviceToHost
                                               : CopyKind::kDeviceToDevice;
    cuda_memcpy(data(), src.data(), nbytes(), kind);
    return;
  }
  Tensor host_src = sd == Device::kCPU ? src : src.to_device(Device::kCPU);
  if (dd == Device::kCPU) {
    copy_from(host_src, sat);
    return;
  }
  Tensor host_dst = empty(shape_, dtype_, category(), Device::kCPU);
  host_dst.copy_from(host_src, sat);
  copy_from(host_dst);
}

void Tensor::fill(float value) {
  if (device() == Device::kCPU) {
    const std::size_t n = static_cast<std::size_t>(numel_);
    const std::size_t es = dtype_size(dtype_);
    if (n == 0) return;
    convert(&value, DType::kF32, data(), dtype_, 1);
    char* p = static_cast<char*>(data());
    for (std::size_t i = 1; i < n; ++i) std::memcpy(p + i * es, p, es);
    return;
  }
  Tensor host = empty(shape_, dtype_, category(), Device::kCPU);
  host.fill(value);
  copy_from(host);
}

void Tensor::zero() {
  const Device d = device();  // throws for an undefined tensor, even an empty one
  if (numel_ == 0) return;    // an empty tensor's data() may be null, which memset may not see
  if (d == Device::kCPU) std::memset(data(), 0, nbytes());
  else cuda_memset(data(), 0, nbytes());
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> out(static_cast<std::size_t>(numel_));
  if (device() == Device::kCPU) {
    convert(data(), dtype_, out.data(), DType::kF32, out.size());
  } else {
    Tensor host = to_device(Device::kCPU);
    convert(host.data(), dtype_, out.data(), DType::kF32, out.size());
  }
  return out;
}

float Tensor::item() const {
  if (numel_ != 1) throw std::invalid_argument("item() of a tensor with " + std::to_string(numel_) + " elements");
  return to_floats()[0];
}

}  // namespace mixpar
