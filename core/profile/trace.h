// The merged profile file (API.md, "Profiling"): Chrome's trace event
// format, one process per rank, one track (thread) per calling thread,
// stream and task priority, every rank's times on rank 0's clock.
//
//   std::string body = TraceEvents(contents, rank, offset_ns, epoch_ns);  // each rank
//   ... rank 0 gathers the bodies ...
//   out << TraceBegin() << body0 << "," << body1 ... << TraceEnd(info);
//
// The format (JSON object form): {"traceEvents": [...], "displayTimeUnit":
// "ms", "otherData": {...}}. Each span is a complete event ("ph": "X") with
// ts and dur in microseconds; metadata events name the processes ("rank
// R") and tracks. docs/profiling.md describes every field.
#ifndef HCOMM_CORE_PROFILE_TRACE_H_
#define HCOMM_CORE_PROFILE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/profile/recorder.h"

namespace hcomm {

// Rank `rank`'s events, comma-separated JSON objects (no brackets): its
// process's and tracks' names, then its spans, with every time moved onto
// the reference clock (t + offset_ns) and counted from epoch_ns there.
std::string TraceEvents(const Recorder::Contents& c, int rank, int64_t offset_ns,
                        int64_t epoch_ns);

std::string TraceBegin();

struct TraceInfo {
  int nranks = 0;
  std::vector<double> clock_error_us; // per rank: how far its times may be off
  std::vector<uint64_t> dropped;      // per rank: spans lost to the bound
  std::vector<int> missing;           // ranks whose spans did not arrive
};
std::string TraceEnd(const TraceInfo& info);

}  // namespace hcomm

#endif  // HCOMM_CORE_PROFILE_TRACE_H_
