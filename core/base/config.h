// Communicator configuration: explicit settings, the environment, defaults.
//
// A Config collects explicit key/value settings (hcomm_config_set); Resolve()
// fills in the rest from the environment and the defaults, validates
// everything and returns the Options a communicator is built from.
//
//   hcomm::Config cfg;
//   HCOMM_RETURN_IF_ERROR(cfg.Set("timeout_ms", "60000"));
//   HCOMM_ASSIGN_OR_RETURN(hcomm::Options opts, cfg.Resolve());
//   // opts.rank, opts.world_size come from HCOMM_RANK, RANK, ... here.
//
// The keys, their environment variables and their defaults are those of the
// "Configuration keys" table of API.md:
//
//   key         environment, first non-empty wins       default
//   rank        HCOMM_RANK, RANK, OMPI_COMM_WORLD_RANK,  (required)
//               PMI_RANK, SLURM_PROCID
//   world_size  HCOMM_WORLD_SIZE, WORLD_SIZE,            (required)
//               OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS
//   store_addr  HCOMM_STORE_ADDR, MASTER_ADDR:MASTER_PORT (required when
//                                                          world_size > 1)
//   job_token   HCOMM_JOB_TOKEN                           "" (open)
//   timeout_ms  HCOMM_TIMEOUT_MS                          300000
//   transports  HCOMM_TRANSPORTS                          "" (auto)
//   algo        HCOMM_ALGO                                auto
//   host_id     HCOMM_HOST_ID                             net::HostName()
//   plugins     HCOMM_PLUGINS                             "" (none)
//
// An environment variable set to the empty string counts as unset.
#ifndef HCOMM_CORE_BASE_CONFIG_H_
#define HCOMM_CORE_BASE_CONFIG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hcomm {

// The largest accepted world_size; ranks are below it.
inline constexpr int kMaxWorldSize = 1 << 20;

// Resolved, validated settings of one communicator.
struct Options {
  int rank = -1;
  int world_size = -1;
  std::string store_addr;  // "host:port" (validated with net::ParseHostPort)
  std::string job_token;   // empty = open
  int64_t timeout_ms = 300000;          // > 0
  std::vector<std::string> transports;  // empty = auto; names of transports built
                                        // in or loaded from plugins; no duplicates
  std::string algo = "auto";            // auto | ring | tree | direct | hierarchical
  std::string host_id;                  // default net::HostName()
  // The network switch (or rack) this rank hangs off, or a file mapping
  // hosts to switches (core/topology/switches.h); both empty: unknown.
  std::string switch_id;
  std::string topology;
  // The bandwidth of a link between switches, Mbit/s, as the cost model
  // prices it when it weighs hierarchical collectives (0: as fast as a link
  // between hosts). Must be equal on every rank.
  int64_t switch_link_mbit = 0;
  // Flow control (core/p2p/flow.h): the most bytes of messages that arrived
  // before their receive this rank holds from any one peer (each counts its
  // payload and 128 bytes); a peer with that much outstanding sends by
  // rendezvous until receives catch up. Published at init: each sender
  // follows its receiver's value.
  int64_t unexpected_bytes = int64_t{4} << 20;
  std::vector<std::string> plugins;     // shared objects to load at init
  // Allreduces queued back to back on a stream run as one up to this many
  // bytes (core/comm/comm_stream.h); 0: never fused; -1 ("auto"): the cost
  // model's size for the communicator's transport (FusionBytes).
  int64_t fusion_bytes = -1;
  // Large operations move in pieces of this many bytes (the ring's chunks;
  // algorithms/cost_model.h); -1 ("auto"): the cost model's size for the
  // communicator's transport (ChunkBytes). Must be equal on every rank.
  int64_t chunk_bytes = -1;
  // Profiling (core/profile): record every operation; at the world
  // communicator's destroy rank 0 writes them all to profile_file.
  bool profile = false;
  int64_t profile_max_events = 131072;  // per rank; older spans give way
  std::string profile_file = "hcomm_profile.json";
  // The flight recorder (core/p2p/flight_recorder.h): the last this many
  // operations of this rank, in a ring of fixed size (0: none). 256 covers
  // several steps of a training loop (tens of collectives and messages
  // each) in 16 KiB, and every rank's whole record still fits in one
  // eager message of a hang report's answer.
  int64_t flight_recorder = 256;
  // Where the flight record is dumped as JSON on a timeout or failure and
  // at the world communicator's destroy ("%r": the rank); empty: never.
  std::string flight_recorder_file;
  // Compression on the wire (API.md "Compression"; core/comm/wire_codec.h):
  // FLOAT32 data as 16-bit floats (kNone: never), and point-to-point and
  // broadcast messages as deltas against the previous one of their kind,
  // keeping at most delta_cache_bytes of previous messages per communicator.
  enum class Half { kNone, kFp16, kBf16 };
  Half compression_half = Half::kNone;
  bool compression_delta = false;
  int64_t delta_cache_bytes = int64_t{64} << 20;
  // Where each value came from, for messages: "config", "default", or
  // "env VAR" (e.g. sources["rank"] == "env RANK"; for a store_addr built
  // from MASTER_ADDR and MASTER_PORT, "env MASTER_ADDR:MASTER_PORT").
  // Resolve() fills an entry for every key.
  std::map<std::string, std::string> sources;
};

// Reads an environment variable: nullopt when it is unset. Tests inject a
// fake (e.g. a lambda over a std::map).
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (getenv).
EnvLookup ProcessEnv();

// Explicit settings plus the rules that complete them into Options.
//
// THREAD SAFETY: const methods may run concurrently; Set() needs exclusive
// access. Copyable.
class Config {
 public:
  // Records an explicit setting, replacing an earlier one of the same key.
  // Validates key and value now:
  //   unknown key: InvalidArgument naming the key and listing the valid keys;
  //   unparsable value: InvalidArgument naming the key, the value and what is
  //   expected.
  // A failed call changes nothing.
  absl::Status Set(absl::string_view key, absl::string_view value);

  // Completes the settings: an explicit Set() wins; else the environment
  // (see the table above); else the default. Every environment value is
  // validated too, and its error names the variable, e.g.
  // "HCOMM_TIMEOUT_MS='abc' is not a positive integer".
  // Errors (all InvalidArgument):
  //   - rank or world_size missing: the message lists every variable tried;
  //   - store_addr missing while world_size > 1;
  //   - exactly one of MASTER_ADDR and MASTER_PORT set (when store_addr is
  //     not otherwise given): the message names the missing one;
  //   - rank >= world_size: the message names both values and their sources.
  // Does not block (host_id's default reads the local host name).
  absl::StatusOr<Options> Resolve(const EnvLookup& env = ProcessEnv()) const;

  // The valid keys, in the order of API.md: rank, world_size, store_addr,
  // job_token, timeout_ms, transports, algo, host_id, plugins.
  static const std::vector<std::string>& Keys();

 private:
  std::map<std::string, std::string> explicit_;  // key -> validated raw value
};

// Parses one key's value into the matching field of *opts (shared by
// Config::Set validation and hcomm_comm_set). Does not touch opts->sources,
// and leaves *opts unchanged on failure. Same errors as Config::Set().
// Integers parse strictly (decimal digits only, no sign, spaces or trailing
// junk, no overflow): rank in [0, kMaxWorldSize), world_size in
// [1, kMaxWorldSize], timeout_ms > 0. transports is a comma list of names
// of [a-z0-9_] (spaces around items are ignored; "" = auto; whether a name
// exists is init's to say, once plugins are loaded); plugins a colon list
// of paths. job_token accepts any string;
// host_id must not be empty.
absl::Status ParseOption(absl::string_view key, absl::string_view value, Options* opts);

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_CONFIG_H_
