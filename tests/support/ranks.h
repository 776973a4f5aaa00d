// Running the same code on every rank of a world and collecting what each rank got: the way
// the tests compare N ranks with one device, or the ranks with each other.
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

#include "comm/local_backend.h"

namespace mixpar::test_support {

// Calls body(world, rank) once per rank and returns what each call returned, by rank (nothing
// when body returns void). Several ranks run as threads of the local backend (run_local: each
// thread has its world communicator and its own memory ledger, and a failure on any rank is
// rethrown here); a single rank runs on the calling thread with no communicator (world is
// nullptr), as a program runs on one device.
template <class Body>
auto on_each_rank(int ranks, Body&& body) {
  using Result = std::invoke_result_t<Body&, Communicator*, int>;
  if constexpr (std::is_void_v<Result>) {
    if (ranks == 1) {
      body(nullptr, 0);
    } else {
      run_local(ranks, [&](Communicator& world) { body(&world, world.rank()); });
    }
  } else {
    // The ranks' threads write their own elements at once: std::vector<bool> packs elements
    // into shared words, which would make that a data race.
    static_assert(!std::is_same_v<Result, bool>, "return a struct or an int, not a bool");
    std::vector<Result> out(static_cast<std::size_t>(ranks));
    if (ranks == 1) {
      out[0] = body(nullptr, 0);
    } else {
      run_local(ranks, [&](Communicator& world) {
        out[static_cast<std::size_t>(world.rank())] = body(&world, world.rank());
      });
    }
    return out;
  }
}

}  // namespace mixpar::test_support
