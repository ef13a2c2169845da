// What hcomm_run gives each rank: the job's identity (store port, token,
// /dev/shm key) and the environment that hcomm_comm_init() reads.
//
// Example:
//   std::string error;
//   std::optional<hcomm_run::JobIdentity> id = hcomm_run::MakeJobIdentity(opts, &error);
//   if (!id) { /* print error, exit 1 */ }
//   std::vector<std::string> base = hcomm_run::BaseEnvironment(environ);
//   std::vector<std::string> env = hcomm_run::RankEnvironment(base, opts, *id, /*local=*/0);
//
// Rank i of node R (of N nodes with LOCAL ranks each) gets the launcher's
// environment plus:
//   RANK=R*LOCAL+i  WORLD_SIZE=N*LOCAL  LOCAL_RANK=i  LOCAL_WORLD_SIZE=LOCAL
//   (with --hostfile, whose hosts may hold different counts: RANK = the
//   slots of the hosts before R + i, WORLD_SIZE = all slots, LOCAL = R's;
//   see Options::GlobalRank)
//   GROUP_RANK=R  NODE_RANK=R  (torchrun sets GROUP_RANK; NODE_RANK is its flag's name)
//   MASTER_ADDR, MASTER_PORT  (where rank 0 serves the rendezvous store)
//   HCOMM_JOB_TOKEN  the launcher's own when set and non-empty (required
//                    with N > 1: every node must use the same one), else
//                    64 hex digits from getrandom()
//   HCOMM_JOB_KEY    16 hex digits; see MakeJobIdentity
//   OMP_NUM_THREADS=1 unless the launcher's environment has it (as torchrun
//                    does: N ranks of an OpenMP program would otherwise each
//                    start a thread per CPU)
// Inherited RANK, WORLD_SIZE, ... and HCOMM_RANK, HCOMM_WORLD_SIZE,
// HCOMM_STORE_ADDR are removed: the library would prefer the HCOMM_ ones
// over what the launcher sets.
//
// THREAD SAFETY: every function is safe to call from any thread
// (BaseEnvironment reads `env` only).
#ifndef HCOMM_TOOLS_HCOMM_RUN_ENV_H_
#define HCOMM_TOOLS_HCOMM_RUN_ENV_H_

#include <optional>
#include <string>
#include <vector>

#include "tools/hcomm_run_options.h"

namespace hcomm_run {

struct JobIdentity {
  int port = 0;         // MASTER_PORT
  std::string token;    // HCOMM_JOB_TOKEN
  std::string job_key;  // HCOMM_JOB_KEY: 16 lowercase hex digits
};

// The port (opts.port, or a free one on 127.0.0.1), the token and the key.
// On one node the key is fresh for every launch, even when the token is
// inherited: it names what this job, and only this job, leaves in /dev/shm.
// With N > 1 it is derived from the token and the port instead
// (HMAC-SHA256(token, "hcomm_run job key <port>"), first 8 bytes), so that
// it is the same on every node: rank 0 makes the name prefix of every
// segment in the job from its own HCOMM_JOB_KEY and hands it to all ranks
// through the store, so a node's launcher with a key of its own would look
// for its ranks' leftovers under the wrong name. The port is mixed in so
// that two jobs that reuse a token still get keys of their own; a one-way
// function because /dev/shm names are visible to every user of the host.
// nullopt with `*error` set when getrandom, the free port or the HMAC fails.
std::optional<JobIdentity> MakeJobIdentity(const Options& opts, std::string* error);

// `env` (a NULL-terminated "KEY=VALUE" array such as environ) minus what
// the launcher sets for each rank, plus OMP_NUM_THREADS=1 when it is absent.
std::vector<std::string> BaseEnvironment(char** env);

// `base` plus the variables of this node's local rank `local`.
std::vector<std::string> RankEnvironment(const std::vector<std::string>& base, const Options& opts,
                                         const JobIdentity& id, int local);

}  // namespace hcomm_run

#endif  // HCOMM_TOOLS_HCOMM_RUN_ENV_H_
