// Streams, events and the region timer. Destructors never throw: a failed destroy is ignored
// (the context is then broken anyway and the next checked call reports it).
#include "cuda/stream.h"

#include <stdexcept>
#include <utility>

#include "cuda/check.h"

namespace mixpar::cuda {

Stream::Stream() { MIXPAR_CUDA_CHECK(cudaStreamCreate(&stream_)); }

// Work still queued finishes first: blocks freed to the caching allocator just before may be
// handed to another stream next, which must not overlap this one's last kernels.
Stream::~Stream() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { MIXPAR_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event(bool timing) {
  MIXPAR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault
                                                             : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { MIXPAR_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { MIXPAR_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  MIXPAR_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

std::size_t RegionTimer::next_event() {
  if (used_ == events_.size()) events_.emplace_back(true);
  return used_++;
}

void RegionTimer::begin(const std::string& name) {
  if (open_) throw std::logic_error("RegionTimer: region '" + name + "' opened inside '" +
                                    open_name_ + "' (regions do not nest)");
  open_name_ = name;
  open_start_ = next_event();
  events_[open_start_].record(stream_);
  open_ = true;
}

void RegionTimer::end() {
  if (!open_) throw std::logic_error("RegionTimer::end without begin");
  const std::size_t stop = next_event();
  events_[stop].record(stream_);
  pending_.push_back({open_name_, open_start_, stop});
  open_ = false;
}

std::map<std::string, RegionTimer::Total> RegionTimer::report() {
  std::map<std::string, Total> out;
  if (pending_.empty()) return out;
  events_[pending_.back().stop].synchronize();  // the last event done: all earlier ones are
  for (const Pending& p : pending_) {
    Total& t = out[p.name];
    t.ms += Event::elapsed_ms(events_[p.start], events_[p.stop]);
    ++t.count;
  }
  return out;
}

void RegionTimer::clear() {
  pending_.clear();
  used_ = 0;
  open_ = false;
}

}  // namespace mixpar::cuda
