// Owning wrappers of CUDA streams and events, and a region timer built on events. Device work
// is asynchronous: a host clock around a launch measures the launch, not the kernel. Events
// recorded on the stream around a region and read after a synchronize measure the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

namespace mixpar::cuda {

// A stream created with default flags: it still synchronises with the legacy default stream,
// so the plain cudaMemcpy / cudaMemset of common/tensor (which use that stream) stay ordered
// with the engine's kernels.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;

  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;

  void record(cudaStream_t stream);
  void synchronize() const;
  cudaEvent_t get() const { return event_; }
  // Milliseconds between two recorded (and completed) timing events.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t event_ = nullptr;
};

// Sums device time per named region: begin(name) / end() pairs record events on the stream;
// report() synchronises and adds them up. Regions of one name (say "layernorm fwd" in every
// layer) accumulate. Events are pooled and reused across steps.
class RegionTimer {
 public:
  explicit RegionTimer(cudaStream_t stream) : stream_(stream) {}
  void begin(const std::string& name);
  void end();
  // Name -> (total ms, count) of every region recorded since the last clear().
  struct Total {
    double ms = 0;
    int count = 0;
  };
  std::map<std::string, Total> report();
  void clear();

 private:
  struct Pending {
    std::string name;
    std::size_t start, stop;  // indices into events_
  };
  std::size_t next_event();
  cudaStream_t stream_;
  std::vector<Event> events_;
  std::size_t used_ = 0;
  std::vector<Pending> pending_;
  std::string open_name_;
  std::size_t open_start_ = 0;
  bool open_ = false;
};

// begin/end of a RegionTimer for one scope; does nothing when the timer is null.
class TimedRegion {
 public:
  TimedRegion(RegionTimer* timer, const char* name) : timer_(timer) {
    if (timer_) timer_->begin(name);
  }
  ~TimedRegion() {
    if (timer_) timer_->end();
  }
  TimedRegion(const TimedRegion&) = delete;
  TimedRegion& operator=(const TimedRegion&) = delete;

 private:
  RegionTimer* timer_;
};

}  // namespace mixpar::cuda
