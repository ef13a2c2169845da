#include "core/base/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/base/net.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

constexpr char kRank[] = "rank";
constexpr char kWorldSize[] = "world_size";
constexpr char kStoreAddr[] = "store_addr";
constexpr char kJobToken[] = "job_token";
constexpr char kTimeoutMs[] = "timeout_ms";
constexpr char kTransports[] = "transports";
constexpr char kAlgo[] = "algo";
constexpr char kHostId[] = "host_id";
constexpr char kPlugins[] = "plugins";
constexpr char kFusionBytes[] = "fusion_bytes";
constexpr char kChunkBytes[] = "chunk_bytes";
constexpr char kProfile[] = "profile";
constexpr char kProfileMaxEvents[] = "profile_max_events";
constexpr char kProfileFile[] = "profile_file";
constexpr char kCompression[] = "compression";
constexpr char kSwitchId[] = "switch_id";
constexpr char kTopology[] = "topology";
constexpr char kDeltaCacheBytes[] = "delta_cache_bytes";
constexpr char kSwitchLinkMbit[] = "switch_link_mbit";
constexpr char kFlightRecorder[] = "flight_recorder";
constexpr char kFlightRecorderFile[] = "flight_recorder_file";
constexpr char kUnexpectedBytes[] = "unexpected_bytes";

constexpr char kMasterAddr[] = "MASTER_ADDR";
constexpr char kMasterPort[] = "MASTER_PORT";
constexpr char kSlurmStepNodelist[] = "SLURM_STEP_NODELIST";

// A transport's name as its table gives it (transports/provider.h checks
// the same): which ones exist is known only at init, once plugins load.
bool TransportName(absl::string_view s) {
  if (s.empty() || s.size() > 31) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

const std::vector<std::string>& ValidAlgos() {
  static const auto* const kValid =
      new std::vector<std::string>{"auto", "ring", "tree", "direct", "hierarchical"};
  return *kValid;
}

bool Contains(const std::vector<std::string>& v, absl::string_view s) {
  for (const std::string& e : v) {
    if (e == s) return true;
  }
  return false;
}

absl::Status UnknownKey(absl::string_view key) {
  return InvalidArgument(absl::StrCat("unknown config key '", key,
                                      "'; valid keys: ", absl::StrJoin(Config::Keys(), ", ")));
}

// "<label>='<value>' is not <expected>". `label` is the config key or the
// environment variable the value came from.
absl::Status BadValue(absl::string_view label, absl::string_view value,
                      absl::string_view expected) {
  return InvalidArgument(absl::StrCat(label, "='", value, "' is not ", expected));
}

// Strict decimal: digits only (no sign, no spaces, no trailing junk) and no
// int64 overflow.
bool ParseDecimal(absl::string_view s, int64_t* out) {
  if (s.empty()) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    int d = c - '0';
    if (v > (std::numeric_limits<int64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

absl::StatusOr<int64_t> ParseInt(absl::string_view label, absl::string_view value, int64_t min,
                                 int64_t max, absl::string_view expected) {
  int64_t v = 0;
  if (!ParseDecimal(value, &v) || v < min || v > max) {
    return BadValue(label, value, expected);
  }
  return v;
}

absl::StatusOr<std::vector<std::string>> ParseTransports(absl::string_view label,
                                                         absl::string_view value) {
  std::vector<std::string> out;
  if (absl::StripAsciiWhitespace(value).empty()) return out;  // auto
  const std::string expected =
      "a comma-separated list of transport names ([a-z0-9_], e.g. shm, tcp or a plugin's) "
      "without duplicates";
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return BadValue(label, value, absl::StrCat(expected, " (empty item)"));
    }
    if (!TransportName(item)) {
      return BadValue(label, value, absl::StrCat(expected, " ('", item, "' is not a name)"));
    }
    if (Contains(out, item)) {
      return BadValue(label, value, absl::StrCat(expected, " ('", item, "' appears twice)"));
    }
    out.emplace_back(item);
  }
  return out;
}

// Colon-separated paths of shared objects (API.md, "Transport plugins").
absl::StatusOr<std::vector<std::string>> ParsePlugins(absl::string_view label,
                                                      absl::string_view value) {
  std::vector<std::string> out;
  if (value.empty()) return out;
  for (absl::string_view item : absl::StrSplit(value, ':')) {
    if (item.empty()) {
      return BadValue(label, value, "a colon-separated list of plugin paths (empty item)");
    }
    out.emplace_back(item);
  }
  return out;
}

// Parses `value` for `key` into *opts; `label` names the origin in errors
// (the key itself, or an environment variable). On failure *opts is
// unchanged.
absl::Status ParseValue(absl::string_view key, absl::string_view value, absl::string_view label,
                        Options* opts) {
  if (key == kRank) {
    HCOMM_ASSIGN_OR_RETURN(
        int64_t v, ParseInt(label, value, 0, kMaxWorldSize - 1,
                            absl::StrCat("an integer from 0 to ", kMaxWorldSize - 1)));
    opts->rank = static_cast<int>(v);
  } else if (key == kWorldSize) {
    HCOMM_ASSIGN_OR_RETURN(
        int64_t v, ParseInt(label, value, 1, kMaxWorldSize,
                            absl::StrCat("an integer from 1 to ", kMaxWorldSize)));
    opts->world_size = static_cast<int>(v);
  } else if (key == kStoreAddr) {
    HCOMM_ASSIGN_OR_RETURN(net::HostPort hp, net::ParseHostPort(value, label));
    if (hp.host.empty()) return BadValue(label, value, "host:port (the host is empty)");
    opts->store_addr = std::string(value);
  } else if (key == kJobToken) {
    opts->job_token = std::string(value);
  } else if (key == kTimeoutMs) {
    HCOMM_ASSIGN_OR_RETURN(int64_t v, ParseInt(label, value, 1,
                                               std::numeric_limits<int64_t>::max(),
                                               "a positive integer"));
    opts->timeout_ms = v;
  } else if (key == kTransports) {
    HCOMM_ASSIGN_OR_RETURN(std::vector<std::string> v, ParseTransports(label, value));
    opts->transports = std::move(v);
  } else if (key == kAlgo) {
    if (!Contains(ValidAlgos(), value)) {
      return BadValue(label, value, absl::StrCat("one of ", absl::StrJoin(ValidAlgos(), ", ")));
    }
    opts->algo = std::string(value);
  } else if (key == kHostId) {
    if (value.empty()) return BadValue(label, value, "a non-empty host identity");
    opts->host_id = std::string(value);
  } else if (key == kFusionBytes) {
    if (value == "auto") {
      opts->fusion_bytes = -1;
    } else {
      HCOMM_ASSIGN_OR_RETURN(
          int64_t v, ParseInt(label, value, 0, int64_t{1} << 40,
                              "'auto' or a number of bytes from 0 (no fusion) to 2^40"));
      opts->fusion_bytes = v;
    }
  } else if (key == kChunkBytes) {
    if (value == "auto") {
      opts->chunk_bytes = -1;
    } else {
      HCOMM_ASSIGN_OR_RETURN(
          int64_t v, ParseInt(label, value, 4096, int64_t{1} << 30,
                              "'auto' or a number of bytes from 4096 to 2^30"));
      opts->chunk_bytes = v;
    }
  } else if (key == kProfile) {
    if (value == "1" || value == "true" || value == "on") {
      opts->profile = true;
    } else if (value == "0" || value == "false" || value == "off") {
      opts->profile = false;
    } else {
      return BadValue(label, value, "1 (record) or 0 (do not)");
    }
  } else if (key == kProfileMaxEvents) {
    HCOMM_ASSIGN_OR_RETURN(int64_t v, ParseInt(label, value, 1, int64_t{1} << 28,
                                               "a number of spans from 1 to 2^28"));
    opts->profile_max_events = v;
  } else if (key == kProfileFile) {
    if (value.empty()) return BadValue(label, value, "a file's path");
    opts->profile_file = std::string(value);
  } else if (key == kSwitchId) {
    if (value.empty()) return BadValue(label, value, "a non-empty switch or rack label");
    opts->switch_id = std::string(value);
  } else if (key == kTopology) {
    if (value.empty()) return BadValue(label, value, "a topology file's path");
    opts->topology = std::string(value);
  } else if (key == kCompression) {
    // none | fp16 | bf16 | delta | fp16,delta | bf16,delta (either order).
    Options::Half half = Options::Half::kNone;
    bool delta = false;
    constexpr char kExpected[] =
        "none, fp16, bf16, delta, fp16,delta or bf16,delta";
    if (value != "none") {
      int halves = 0;
      for (absl::string_view item : absl::StrSplit(value, ',')) {
        if (item == "fp16" || item == "bf16") {
          half = item == "fp16" ? Options::Half::kFp16 : Options::Half::kBf16;
          ++halves;
        } else if (item == "delta" && !delta) {
          delta = true;
        } else {
          return BadValue(label, value, kExpected);
        }
      }
      if (halves > 1) return BadValue(label, value, kExpected);
    }
    opts->compression_half = half;
    opts->compression_delta = delta;
  } else if (key == kDeltaCacheBytes) {
    HCOMM_ASSIGN_OR_RETURN(int64_t v, ParseInt(label, value, 0, int64_t{1} << 40,
                                               "a number of bytes from 0 to 2^40"));
    opts->delta_cache_bytes = v;
  } else if (key == kSwitchLinkMbit) {
    HCOMM_ASSIGN_OR_RETURN(int64_t v, ParseInt(label, value, 0, int64_t{1} << 30,
                                               "Mbit/s from 0 (as between hosts) to 2^30"));
    opts->switch_link_mbit = v;
  } else if (key == kUnexpectedBytes) {
    // At least one eager message of the largest size and its entry
    // (core/p2p/flow.h), so that every small message can go eagerly.
    HCOMM_ASSIGN_OR_RETURN(int64_t v, ParseInt(label, value, int64_t{1} << 17, int64_t{1} << 40,
                                               "a number of bytes from 131072 to 2^40"));
    opts->unexpected_bytes = v;
  } else if (key == kFlightRecorder) {
    HCOMM_ASSIGN_OR_RETURN(int64_t v, ParseInt(label, value, 0, int64_t{1} << 20,
                                               "a number of operations from 0 (off) to 2^20"));
    opts->flight_recorder = v;
  } else if (key == kFlightRecorderFile) {
    if (value.empty()) return BadValue(label, value, "a file's path");
    opts->flight_recorder_file = std::string(value);
  } else if (key == kPlugins) {
    HCOMM_ASSIGN_OR_RETURN(std::vector<std::string> v, ParsePlugins(label, value));
    opts->plugins = std::move(v);
  } else {
    return UnknownKey(key);
  }
  return absl::OkStatus();
}

// The environment variables consulted for `key`, in order.
std::vector<std::string> EnvVarsFor(absl::string_view key) {
  std::vector<std::string> vars = {absl::StrCat("HCOMM_", absl::AsciiStrToUpper(key))};
  if (key == kRank) {
    vars.insert(vars.end(), {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"});
  } else if (key == kWorldSize) {
    vars.insert(vars.end(), {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
  }
  return vars;
}

// The value of `name`, or nullopt when it is unset or empty.
std::optional<std::string> NonEmpty(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> v = env(name);
  if (v.has_value() && v->empty()) return std::nullopt;
  return v;
}

// The first host of a Slurm hostlist: "node[07-09,12],gpu3" -> "node07",
// "n[1-2]-ib" -> "n1-ib", "a,b" -> "a"; nullopt for one it cannot read.
std::optional<std::string> FirstSlurmHost(absl::string_view list) {
  const size_t end = list.find_first_of("[,");
  if (end == 0) return std::nullopt;
  if (end == absl::string_view::npos || list[end] == ',') {
    return std::string(list.substr(0, end));
  }
  const size_t close = list.find(']', end);
  const size_t first_end = list.find_first_of("-,]", end + 1);
  if (close == absl::string_view::npos || first_end == end + 1) return std::nullopt;
  const absl::string_view first = list.substr(end + 1, first_end - end - 1);
  if (!std::all_of(first.begin(), first.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  const absl::string_view rest = list.substr(close + 1);
  const absl::string_view suffix = rest.substr(0, rest.find(','));
  if (suffix.find('[') != absl::string_view::npos) return std::nullopt;
  return absl::StrCat(list.substr(0, end), first, suffix);
}

// Under srun without MASTER_ADDR: the step's first node, and the first port
// Slurm reserved for the step (SLURM_STEP_RESV_PORTS, where MpiParams sets
// ports) or else one from the job and step ids (20000-39999). nullopt
// outside a step.
absl::StatusOr<std::optional<std::string>> SlurmStoreAddr(const EnvLookup& env) {
  std::optional<std::string> nodes = NonEmpty(env, kSlurmStepNodelist);
  if (!nodes.has_value()) return std::optional<std::string>();
  std::optional<std::string> host = FirstSlurmHost(*nodes);
  if (!host.has_value()) {
    return BadValue(kSlurmStepNodelist, *nodes, "a Slurm hostlist such as node[01-04],gpu7");
  }
  int64_t port = -1;
  if (std::optional<std::string> ports = NonEmpty(env, "SLURM_STEP_RESV_PORTS")) {
    int64_t p = 0;
    if (absl::SimpleAtoi(absl::string_view(*ports).substr(0, ports->find_first_of("-,")), &p) &&
        p > 0 && p < 65536) {
      port = p;
    }
  }
  if (port < 0) {
    int64_t job = 0, step = 0;
    std::optional<std::string> j = NonEmpty(env, "SLURM_JOB_ID");
    std::optional<std::string> st = NonEmpty(env, "SLURM_STEP_ID");
    if (!j.has_value() || !absl::SimpleAtoi(*j, &job) || job < 0) {
      return BadValue("SLURM_JOB_ID", j.value_or(""), "a job id (set by srun)");
    }
    if (st.has_value() && (!absl::SimpleAtoi(*st, &step) || step < 0)) step = 0;
    port = 20000 + (job * 64 + step) % 20000;
  }
  return std::optional<std::string>(absl::StrCat(*host, ":", port));
}

std::string MissingRequired(absl::string_view key) {
  return absl::StrCat(key, " is not set: set config key '", key,
                      "' or one of the environment variables ",
                      absl::StrJoin(EnvVarsFor(key), ", "), " (all are unset or empty)");
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

const std::vector<std::string>& Config::Keys() {
  static const auto* const kKeys = new std::vector<std::string>{
      kRank, kWorldSize, kStoreAddr, kJobToken, kTimeoutMs, kTransports, kAlgo, kHostId,
      kPlugins, kFusionBytes, kChunkBytes, kProfile, kProfileMaxEvents, kProfileFile,
      kCompression, kDeltaCacheBytes, kSwitchId, kTopology, kSwitchLinkMbit, kUnexpectedBytes,
      kFlightRecorder, kFlightRecorderFile};
  return *kKeys;
}

absl::Status ParseOption(absl::string_view key, absl::string_view value, Options* opts) {
  if (opts == nullptr) return InvalidArgument("ParseOption: opts is NULL");
  return ParseValue(key, value, key, opts);
}

absl::Status Config::Set(absl::string_view key, absl::string_view value) {
  Options scratch;
  HCOMM_RETURN_IF_ERROR(ParseValue(key, value, key, &scratch));
  explicit_[std::string(key)] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<Options> Config::Resolve(const EnvLookup& env) const {
  Options opts;
  std::vector<std::string> missing;
  bool store_addr_set = false;
  for (const std::string& key : Keys()) {
    if (auto it = explicit_.find(key); it != explicit_.end()) {
      HCOMM_RETURN_IF_ERROR(ParseValue(key, it->second, key, &opts));
      opts.sources[key] = "config";
      if (key == kStoreAddr) store_addr_set = true;
      continue;
    }
    bool found = false;
    for (const std::string& var : EnvVarsFor(key)) {
      std::optional<std::string> v = NonEmpty(env, var);
      if (!v.has_value()) continue;
      HCOMM_RETURN_IF_ERROR(ParseValue(key, *v, var, &opts));
      opts.sources[key] = absl::StrCat("env ", var);
      found = true;
      break;
    }
    if (!found && key == kStoreAddr) {
      std::optional<std::string> addr = NonEmpty(env, kMasterAddr);
      std::optional<std::string> port = NonEmpty(env, kMasterPort);
      if (addr.has_value() != port.has_value()) {
        const char* have = addr.has_value() ? kMasterAddr : kMasterPort;
        const char* lack = addr.has_value() ? kMasterPort : kMasterAddr;
        return InvalidArgument(absl::StrCat(
            have, "='", addr.has_value() ? *addr : *port, "' is set but ", lack,
            " is not; the store address needs both (or set HCOMM_STORE_ADDR or config key "
            "'store_addr')"));
      }
      if (addr.has_value()) {
        std::string label = absl::StrCat(kMasterAddr, ":", kMasterPort);
        HCOMM_RETURN_IF_ERROR(ParseValue(key, absl::StrCat(*addr, ":", *port), label, &opts));
        opts.sources[key] = absl::StrCat("env ", label);
        found = true;
      }
    }
    if (!found && key == kStoreAddr && opts.sources[kWorldSize] == "env SLURM_NTASKS") {
      // A step started by srun alone: rank 0 runs on the step's first node.
      HCOMM_ASSIGN_OR_RETURN(std::optional<std::string> slurm, SlurmStoreAddr(env));
      if (slurm.has_value()) {
        HCOMM_RETURN_IF_ERROR(ParseValue(key, *slurm, kSlurmStepNodelist, &opts));
        opts.sources[key] = absl::StrCat("env ", kSlurmStepNodelist);
        found = true;
      }
    }
    if (found) {
      if (key == kStoreAddr) store_addr_set = true;
      continue;
    }
    if (key == kRank || key == kWorldSize) {
      missing.push_back(MissingRequired(key));
      continue;
    }
    if (key == kHostId) opts.host_id = net::HostName();
    opts.sources[key] = "default";
  }

  if (!missing.empty()) return InvalidArgument(absl::StrJoin(missing, "; "));
  if (opts.world_size > 1 && !store_addr_set) {
    return InvalidArgument(absl::StrCat(
        "store_addr is not set but world_size is ", opts.world_size, " (",
        opts.sources[kWorldSize], "): set config key 'store_addr', or HCOMM_STORE_ADDR, "
        "or MASTER_ADDR and MASTER_PORT (under srun, SLURM_STEP_NODELIST serves)"));
  }
  if (opts.rank >= opts.world_size) {
    return InvalidArgument(absl::StrCat("rank ", opts.rank, " (", opts.sources[kRank],
                                        ") is out of range for world_size ", opts.world_size,
                                        " (", opts.sources[kWorldSize], "); rank must be below ",
                                        "world_size"));
  }
  return opts;
}

}  // namespace hcomm
