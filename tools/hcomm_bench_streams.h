// hcomm_bench's stream benchmarks (priority, fusion): see
// hcomm_bench_streams.cc.
#ifndef HCOMM_TOOLS_HCOMM_BENCH_STREAMS_H_
#define HCOMM_TOOLS_HCOMM_BENCH_STREAMS_H_

#include <string>

namespace hcomm_bench {

// Whether `op` is one of the stream benchmarks.
bool IsStreamOp(const std::string& op);
// Their lines of the usage text.
const char* StreamOpsUsage();
// Runs it with the flags after OP; returns the exit status.
int RunStreamOp(const std::string& op, int argc, char** argv);

}  // namespace hcomm_bench

#endif  // HCOMM_TOOLS_HCOMM_BENCH_STREAMS_H_
