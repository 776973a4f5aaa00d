// Spans of work on a timeline, per rank and thread, written as Chrome trace JSON (the
// "traceEvents" format that chrome://tracing and Perfetto open): one process per rank, one
// thread row for compute and one for communication, so overlap is visible at a glance.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mixpar {

// Microseconds on the machine's monotonic clock: comparable across the threads of a process
// and across the processes of one machine (MPI ranks on a laptop).
double trace_now_us();

struct TraceSpan {
  std::string name;  // "forward", "backward", "all_reduce bucket 3 (1.2 MiB)", "wait"
  std::string cat;   // "compute" | "comm" | "exposed"
  int rank = 0;
  int thread = 0;    // 0: the rank's compute thread, 1: its communication thread
  double start_us = 0, dur_us = 0;
};

// The JSON text: complete events ("ph": "X") with times relative to the earliest span, plus
// metadata naming each process "rank r" and each thread "compute" / "communication".
std::string chrome_trace_json(std::span<const TraceSpan> spans);

// Writes chrome_trace_json(spans) to path atomically (InputError naming the path on failure).
void write_chrome_trace(const std::string& path, std::span<const TraceSpan> spans);

// Collective: every rank's spans, rank 0's first, on rank 0; the other ranks get none. Each
// rank sends its spans to rank 0 as text, so it works alike across threads and processes.
std::vector<TraceSpan> gather_spans(Communicator& comm, std::vector<TraceSpan> mine);

}  // namespace mixpar
