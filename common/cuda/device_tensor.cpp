// DeviceTensor's storage, views and copies. Host <-> device copies go through cudaMemcpyAsync
// on the caller's stream; from pageable host memory that call returns once the source has been
// staged, so the host buffer may be freed right after it.
#include "cuda/device_tensor.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "numerics/convert_cuda.h"

namespace mixpar::cuda {

DeviceBlock::DeviceBlock(std::size_t n, MemCategory c, CachingAllocator& a, MemoryLedger& ledger,
                         cudaStream_t stream)
    : allocator(&a), ptr(a.allocate(n, c, ledger, stream)), bytes(n), category(c) {}

DeviceBlock::~DeviceBlock() {
  try {
    allocator->deallocate(ptr);  // ledger refusals are counted and reported by the allocator
  } catch (const std::exception& e) {
    // A destructor must not throw. What is left (a pointer the allocator does not know, or a
    // CUDA error recording the free's event) is a real fault: said, not swallowed.
    std::fprintf(stderr, "mixpar cuda: freeing a %zu-byte device block failed: %s\n", bytes,
                 e.what());
  }
}

DeviceTensor DeviceTensor::empty(Shape shape, DType dtype, MemCategory category,
                                 CachingAllocator* allocator, MemoryLedger* ledger,
                                 cudaStream_t stream) {
  DeviceTensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.block_ = std::make_shared<DeviceBlock>(t.nbytes(), category,
                                           allocator ? *allocator : device_allocator(),
                                           ledger ? *ledger : current_ledger(), stream);
  return t;
}

DeviceTensor DeviceTensor::from_host(const Tensor& host, MemCategory category,
                                     cudaStream_t stream) {
  DeviceTensor t = empty(host.shape(), host.dtype(), category);
  t.copy_from_host(host, stream);
  return t;
}

std::int64_t DeviceTensor::dim(int i) const {
  const int n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n) {
    throw std::out_of_range("DeviceTensor::dim " + std::to_string(i) + " of " + shape_str(shape_));
  }
  return shape_[static_cast<std::size_t>(i)];
}

MemCategory DeviceTensor::category() const {
  if (!block_) throw std::logic_error("undefined device tensor");
  return block_->category;
}

void* DeviceTensor::data() const {
  if (!block_) throw std::logic_error("undefined device tensor");
  return static_cast<char*>(block_->ptr) + offset_bytes_;
}

void DeviceTensor::mark_used_on(cudaStream_t stream) const {
  if (!block_) throw std::logic_error("undefined device tensor");
  block_->allocator->mark_used_on(block_->ptr, stream);
}

float* DeviceTensor::f32() const {
  if (dtype_ != DType::kF32) {
    throw std::invalid_argument("DeviceTensor::f32: tensor is " + std::string(dtype_name(dtype_)));
  }
  return static_cast<float*>(data());
}

double* DeviceTensor::f64() const {
  if (dtype_ != DType::kF64) {
    throw std::invalid_argument("DeviceTensor::f64: tensor is " + std::string(dtype_name(dtype_)));
  }
  return static_cast<double*>(data());
}

DeviceTensor DeviceTensor::view(Shape shape) const {
  if (shape_numel(shape) != numel_) {
    throw std::invalid_argument("DeviceTensor::view " + shape_str(shape) + " of " +
                                shape_str(shape_));
  }
  DeviceTensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

DeviceTensor DeviceTensor::flat_slice(std::int64_t begin, std::int64_t count) const {
  if (begin < 0 || count < 0 || begin > numel_ || count > numel_ - begin) {
    throw std::out_of_range("DeviceTensor::flat_slice [" + std::to_string(begin) + ", +" +
                            std::to_string(count) + ") of " + std::to_string(numel_));
  }
  DeviceTensor t = *this;
  t.offset_bytes_ += static_cast<std::size_t>(begin) * dtype_size(dtype_);
  t.shape_ = {count};
  t.numel_ = count;
  return t;
}

DeviceTensor DeviceTensor::rows(std::int64_t begin, std::int64_t count) const {
  if (ndim() == 0) throw std::invalid_argument("DeviceTensor::rows of a 0-d tensor");
  const std::int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  if (begin < 0 || count < 0 || begin > shape_[0] || count > shape_[0] - begin) {
    throw std::out_of_range("DeviceTensor::rows [" + std::to_string(begin) + ", +" +
                            std::to_string(count) + ") of " + shape_str(shape_));
  }
  DeviceTensor t = flat_slice(begin * row, count * row);
  Shape s = shape_;
  s[0] = count;
  t.shape_ = std::move(s);
  return t;
}

void DeviceTensor::copy_from_host(const Tensor& host, cudaStream_t stream) {
  if (!host.is_cpu()) throw std::invalid_argument("copy_from_host: source is not a CPU tensor");
  if (host.numel() != numel_) {
    throw std::invalid_argument("copy_from_host: " + shape_str(host.shape()) + " into " +
                                shape_str(shape_));
  }
  const Tensor staged = host.dtype() == dtype_ ? host : host.to(dtype_);
  MIXPAR_CUDA_CHECK(
      cudaMemcpyAsync(data(), staged.data(), nbytes(), cudaMemcpyHostToDevice, stream));
  // `staged` may be a temporary: pageable copies have read it by the time the call returns.
}

void DeviceTensor::copy_from(const DeviceTensor& src, cudaStream_t stream) {
  if (src.numel_ != numel_) {
    throw std::invalid_argument("DeviceTensor::copy_from: " + shape_str(src.shape_) + " into " +
                                shape_str(shape_));
  }
  if (nbytes() == 0) return;
  if (src.dtype_ != dtype_) {
    // The legacy stream waits for `stream` (a blocking stream) before the conversion runs.
    convert_on_device(src.data(), src.dtype_, data(), dtype_, static_cast<std::size_t>(numel_));
    return;
  }
  MIXPAR_CUDA_CHECK(
      cudaMemcpyAsync(data(), src.data(), nbytes(), cudaMemcpyDeviceToDevice, stream));
}

Tensor DeviceTensor::to_host(cudaStream_t stream) const {
  Tensor out = Tensor::empty(shape_, dtype_, MemCategory::kOther);
  if (nbytes() > 0) {
    MIXPAR_CUDA_CHECK(
        cudaMemcpyAsync(out.data(), data(), nbytes(), cudaMemcpyDeviceToHost, stream));
  }
  MIXPAR_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

std::vector<float> DeviceTensor::to_floats(cudaStream_t stream) const {
  return to_host(stream).to_floats();
}

void DeviceTensor::fill_bytes(int byte, cudaStream_t stream) {
  if (nbytes() == 0) return;
  MIXPAR_CUDA_CHECK(cudaMemsetAsync(data(), byte, nbytes(), stream));
}

DeviceIds DeviceIds::upload(std::span<const std::int32_t> ids, cudaStream_t stream,
                            MemCategory category) {
  DeviceIds d;
  d.size_ = static_cast<std::int64_t>(ids.size());
  d.block_ = std::make_shared<DeviceBlock>(ids.size_bytes(), category, device_allocator(),
                                           current_ledger(), stream);
  if (!ids.empty()) {
    MIXPAR_CUDA_CHECK(cudaMemcpyAsync(d.block_->ptr, ids.data(), ids.size_bytes(),
                                      cudaMemcpyHostToDevice, stream));
  }
  return d;
}

const std::int32_t* DeviceIds::data() const {
  if (!block_) throw std::logic_error("undefined DeviceIds");
  return static_cast<const std::int32_t*>(block_->ptr);
}

void ensure_device_tensor(DeviceTensor& t, const Shape& shape, DType dtype, MemCategory category,
                          cudaStream_t stream) {
  if (t.defined() && t.shape() == shape && t.dtype() == dtype && t.category() == category) return;
  t = DeviceTensor();
  t = DeviceTensor::empty(shape, dtype, category, nullptr, nullptr, stream);
}

ScopedDeviceLedger::ScopedDeviceLedger(int rank) : ledger_(rank), scope_(ledger_) {}

ScopedDeviceLedger::~ScopedDeviceLedger() {
  const std::size_t outliving = device_allocator().forget_ledger(ledger_);
  if (outliving > 0) {
    std::fprintf(stderr,
                 "mixpar cuda: %zu device blocks outlive their scoped ledger (rank %d); their "
                 "frees will not be credited to it\n",
                 outliving, ledger_.rank());
  }
}

}  // namespace mixpar::cuda
