// Runs N ranks of a job as threads of the test process, each with its own
// Communicator, over a rendezvous store on a free loopback port.
//
//   hcomm::testing::RunRanks(4, [](int rank, const hcomm::Options& opts) {
//     auto comm = hcomm::Communicator::Init(opts);
//     ASSERT_TRUE(comm.ok()) << comm.status();
//     ...
//   });
#ifndef HCOMM_TESTING_MULTIRANK_H_
#define HCOMM_TESTING_MULTIRANK_H_

#include <functional>
#include <string>

#include "core/base/config.h"

namespace hcomm {
namespace testing {

// Which transports the ranks of the following RunRanks calls use:
// kDefault (shared memory, as all ranks share a host id), kTcp, kShm,
// kMixed (ranks on two pretend hosts: shm within, TCP between), or kUds
// (the plugin example examples/plugin, loaded from the test's runfiles:
// a test that uses it lists //examples/plugin:libhcomm_uds.so in its data).
enum class TransportMode { kDefault, kTcp, kShm, kMixed, kUds };
void SetTransportMode(TransportMode mode);
const char* TransportModeName(TransportMode mode);

// The plugin example's shared object in the test's runfiles.
std::string UdsPluginPath();

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

// Options for `rank` of `world_size` with a store at 127.0.0.1:port.
Options RankOptions(int rank, int world_size, int port, int64_t timeout_ms = 30000,
                    const std::string& token = "test-token");

// Runs fn(rank, options) on world_size threads and joins them.
void RunRanks(int world_size, const std::function<void(int, const Options&)>& fn,
              int64_t timeout_ms = 30000);

}  // namespace testing
}  // namespace hcomm

#endif  // HCOMM_TESTING_MULTIRANK_H_
