// The local world: one fabric, one thread per rank, and the runner that joins them
// (comm/local_backend.h, LocalWorld).
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/local_backend.h"
#include "comm/local_fabric.h"

namespace mixpar {

LocalWorld::LocalWorld(int world_size, LocalOptions opts)
    : fabric_(std::make_unique<local::Fabric>(world_size, opts.watchdog_seconds,
                                              opts.synchronous_sends, opts.eager_limit_bytes,
                                              opts.spin_microseconds,
                                              opts.oneshot_max_bytes)) {
  const std::vector<int> everyone = fabric_->members(0);
  for (int r = 0; r < world_size; ++r) {
    comms_.push_back(std::make_unique<LocalCommunicator>(*fabric_, 0, everyone, r));
  }
}

LocalWorld::~LocalWorld() { fabric_->park_busy_ledgers(); }

MemoryLedger& LocalWorld::ledger(int rank) { return fabric_->ledger(rank); }
MemoryLedger& LocalWorld::network_ledger() { return fabric_->network_ledger(); }
std::int64_t LocalWorld::lost_wakeups() const { return fabric_->lost_wakeups(); }
LocalCommunicator& LocalWorld::comm(int rank) { return *comms_.at(static_cast<std::size_t>(rank)); }

void LocalWorld::run(const std::function<void(Communicator&)>& fn) {
  fabric_->begin_run();
  const auto rank_main = [this, &fn](int r) {
    LedgerScope scope(fabric_->ledger(r));
    try {
      fn(*comms_[static_cast<std::size_t>(r)]);
    } catch (...) {
      fabric_->rank_failed(r, std::current_exception());
      return;
    }
    fabric_->rank_finished(r);
  };
  std::vector<std::thread> threads;
  threads.reserve(comms_.size());
  for (int r = 0; r < size(); ++r) {
    try {
      threads.emplace_back(rank_main, r);
    } catch (...) {
      // Ranks that never started count as failed, so the started ones are released.
      for (int q = r; q < size(); ++q) fabric_->rank_failed(q, std::current_exception());
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (const std::exception_ptr error = fabric_->end_run()) std::rethrow_exception(error);
}

void run_local(int world_size, const std::function<void(Communicator&)>& fn,
               const LocalOptions& opts) {
  LocalWorld world(world_size, opts);
  world.run(fn);
}

}  // namespace mixpar
