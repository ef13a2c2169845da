#include "tools/hcomm_run_options.h"

#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace hcomm_run {

const char kUsage[] =
    "usage: hcomm_run -n N [--timeout S] [--port P] [--bind-to auto|core|none]\n"
    "                 [--tag-output=0|1] -- PROG [ARGS...]\n"
    "       hcomm_run --nnodes N --node-rank R --master-addr A --master-port P\n"
    "                 -n LOCAL [options] -- PROG [ARGS...]\n"
    "\n"
    "Starts N local ranks of PROG (1 <= N <= 1024). Each rank gets RANK,\n"
    "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and NODE_RANK,\n"
    "MASTER_ADDR (default 127.0.0.1), MASTER_PORT, HCOMM_JOB_TOKEN (fresh\n"
    "unless already set), HCOMM_JOB_KEY and OMP_NUM_THREADS=1 (unless already\n"
    "set) in its environment. Output lines are prefixed with \"[rank R] \" (a\n"
    "line over 1 MiB is cut there, each piece prefixed). If a rank fails, the\n"
    "others are stopped (SIGTERM, SIGKILL after 3 s). When all have ended, the\n"
    "job's segments left in /dev/shm (hcomm-<HCOMM_JOB_KEY>-*) are removed.\n"
    "\n"
    "Multi-host: run one hcomm_run per node with the same --nnodes,\n"
    "--master-addr (node 0's address), --master-port and -n, and\n"
    "--node-rank 0..N-1; node R's local rank i is RANK R*LOCAL+i of\n"
    "WORLD_SIZE N*LOCAL. Every node must export the same HCOMM_JOB_TOKEN,\n"
    "e.g. export HCOMM_JOB_TOKEN=$(openssl rand -hex 32).\n"
    "\n"
    "options:\n"
    "  -n, --nproc N        ranks on this node (--nproc-per-node: the same)\n"
    "  --nnodes N           nodes in the job (default 1)\n"
    "  --node-rank R        this node's index, 0 <= R < N (default 0)\n"
    "  --master-addr A      where rank 0 (on node 0) serves the rendezvous\n"
    "                       store; required with --nnodes > 1\n"
    "  --master-port P      its port (--port: the same); required with\n"
    "                       --nnodes > 1, else a free port by default\n"
    "  --timeout S          stop the job after S seconds (exit status 124)\n"
    "  --bind-to W          core: pin rank R to the R-th CPU this launcher may\n"
    "                       use (round robin); none: let the kernel place them;\n"
    "                       auto (default): core when the ranks outnumber those\n"
    "                       CPUs, none otherwise\n"
    "  --tag-output=0|1     1 (default): prefix lines with \"[rank R] \"; 0: print\n"
    "                       the ranks' lines as they are\n"
    "  -h, --help           print this message\n"
    "torchrun's spellings --nproc_per_node, --node_rank, --master_addr and\n"
    "--master_port work too.\n"
    "\n"
    "exit status: 0 if all ranks exit 0; the first failing rank's status\n"
    "(128+signal if it was killed); 124 on timeout; 2 on bad usage.\n";

namespace {

constexpr double kMaxTimeoutSeconds = 1e8;

// getopt_long's values for the options without a short name.
enum LongOnly {
  kOptTimeout = 256,
  kOptPort,
  kOptBindTo,
  kOptNnodes,
  kOptNodeRank,
  kOptMasterAddr,
  kOptTagOutput,
};

const option kLongOptions[] = {
    {"nproc", required_argument, nullptr, 'n'},
    {"nproc-per-node", required_argument, nullptr, 'n'},
    {"nnodes", required_argument, nullptr, kOptNnodes},
    {"node-rank", required_argument, nullptr, kOptNodeRank},
    {"master-addr", required_argument, nullptr, kOptMasterAddr},
    {"master-port", required_argument, nullptr, kOptPort},
    {"port", required_argument, nullptr, kOptPort},
    {"timeout", required_argument, nullptr, kOptTimeout},
    {"bind-to", required_argument, nullptr, kOptBindTo},
    {"tag-output", required_argument, nullptr, kOptTagOutput},
    {"help", no_argument, nullptr, 'h'},
    // torchrun's older spellings, which it still takes.
    {"nproc_per_node", required_argument, nullptr, 'n'},
    {"node_rank", required_argument, nullptr, kOptNodeRank},
    {"master_addr", required_argument, nullptr, kOptMasterAddr},
    {"master_port", required_argument, nullptr, kOptPort},
    {nullptr, 0, nullptr, 0},
};

std::optional<long> ParseInt(const char* text, long min, long max) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return std::nullopt;
  return value;
}

std::optional<double> ParseSeconds(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double value = strtod(text, &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(value) || value <= 0 ||
      value > kMaxTimeoutSeconds) {
    return std::nullopt;
  }
  return value;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// Resolves PROG like execvp() does: as a path if it contains '/', else
// through $PATH. Returns nullopt if no executable regular file is found.
std::optional<std::string> ResolveProgram(const std::string& prog) {
  if (prog.empty()) return std::nullopt;
  if (prog.find('/') != std::string::npos) {
    if (IsExecutableFile(prog)) return prog;
    return std::nullopt;
  }
  const char* path_env = getenv("PATH");
  std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + prog;
    if (IsExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

// What getopt_long could not take, `arg` ("--...") as the user wrote it: an
// unknown option, an abbreviation of several ("--master"), or a value given
// to --help.
std::string UnknownOption(const std::string& arg) {
  const size_t eq = arg.find('=');
  const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
  std::string matches;
  int count = 0;
  bool exact = false;
  for (const option* o = kLongOptions; o->name != nullptr; ++o) {
    if (name.empty() || strncmp(o->name, name.c_str(), name.size()) != 0) continue;
    matches += std::string(count++ > 0 ? ", --" : "--") + o->name;
    exact = exact || name == o->name;
  }
  if (count > 1 && !exact) return "ambiguous option '" + arg + "' (" + matches + ")";
  if (count > 0 && eq != std::string::npos) return "option '" + arg + "' takes no value";
  return "unknown option '" + arg + "'";
}

// Checks that need every option: the ranges that depend on --nnodes and
// what a multi-host job must be told. Empty when all is well.
std::string CheckJob(const Options& o, bool have_n, bool have_addr) {
  if (!have_n) return "missing -n N";
  const std::string nodes = "--nnodes " + std::to_string(o.nnodes);
  if (o.node_rank >= o.nnodes) {
    return "--node-rank " + std::to_string(o.node_rank) + " is out of range for " + nodes +
           " (0 to " + std::to_string(o.nnodes - 1) + ")";
  }
  if (o.nnodes == 1) return "";
  if (!have_addr) return nodes + " needs --master-addr (node 0's address, the same on every node)";
  if (o.port == 0) return nodes + " needs --master-port (the same on every node)";
  const char* token = getenv("HCOMM_JOB_TOKEN");
  if (token == nullptr || *token == '\0') {
    return nodes + ": HCOMM_JOB_TOKEN is not set (or empty); every node must use the same " +
           "token: export the same HCOMM_JOB_TOKEN on every node, e.g. run " +
           "`export HCOMM_JOB_TOKEN=$(openssl rand -hex 32)` on one and copy the value";
  }
  return "";
}

}  // namespace

ParseResult ParseArgs(int argc, char** argv, Options* opts, std::string* error) {
  bool have_n = false;
  bool have_addr = false;
  // "+": stop at the first word that is not an option (PROG); ":": report a
  // missing value as ':' rather than '?'. opterr = 0: the messages are ours.
  opterr = 0;
  optind = 0;  // glibc: start afresh, as for a new argv
  for (;;) {
    const int prev_optind = optind == 0 ? 1 : optind;
    int long_index = -1;
    const int c = getopt_long(argc, argv, "+:n:h", kLongOptions, &long_index);
    if (c == -1) break;
    // The option as the user wrote it ("-n4", "--mast=x"), and its full name.
    const std::string arg = prev_optind < argc ? argv[prev_optind] : "";
    const std::string name =
        long_index >= 0 ? std::string("--") + kLongOptions[long_index].name : arg.substr(0, 2);
    const std::string value = optarg != nullptr ? optarg : "";
    switch (c) {
      case 'h':
        return ParseResult::kHelp;
      case ':':
        *error = "option '" + (arg.compare(0, 2, "--") == 0 ? arg : name) + "' needs a value";
        return ParseResult::kUsageError;
      case '?':
        *error = arg.compare(0, 2, "--") == 0
                     ? UnknownOption(arg)
                     : "unknown option '-" + std::string(1, static_cast<char>(optopt)) + "'";
        return ParseResult::kUsageError;
      case 'n': {
        std::optional<long> n = ParseInt(value.c_str(), 1, kMaxRanks);
        if (!n) {
          *error = "-n needs an integer from 1 to " + std::to_string(kMaxRanks) + ", got '" +
                   value + "'";
          return ParseResult::kUsageError;
        }
        opts->nranks = static_cast<int>(*n);
        have_n = true;
        break;
      }
      case kOptNnodes: {
        std::optional<long> n = ParseInt(value.c_str(), 1, kMaxNodes);
        if (!n) {
          *error = "--nnodes needs an integer from 1 to " + std::to_string(kMaxNodes) +
                   ", got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->nnodes = static_cast<int>(*n);
        break;
      }
      case kOptNodeRank: {
        std::optional<long> r = ParseInt(value.c_str(), 0, kMaxNodes - 1);
        if (!r) {
          *error = "--node-rank needs an integer from 0 to --nnodes - 1, got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->node_rank = static_cast<int>(*r);
        break;
      }
      case kOptMasterAddr:
        if (value.empty() || value.find_first_of(" \t\n") != std::string::npos) {
          *error = "--master-addr needs a host name or address, got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->master_addr = value;
        have_addr = true;
        break;
      case kOptPort: {
        std::optional<long> p = ParseInt(value.c_str(), 1, 65535);
        if (!p) {
          *error = name + " needs an integer from 1 to 65535, got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->port = static_cast<int>(*p);
        break;
      }
      case kOptTimeout:
        opts->timeout_s = ParseSeconds(value.c_str());
        if (!opts->timeout_s) {
          *error = "--timeout needs a positive number of seconds, got '" + value + "'";
          return ParseResult::kUsageError;
        }
        break;
      case kOptBindTo:
        if (value != "core" && value != "none" && value != "auto") {
          *error = "--bind-to needs 'core', 'none' or 'auto', got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->bind = value == "core"   ? Options::Bind::kCore
                     : value == "none" ? Options::Bind::kNone
                                       : Options::Bind::kAuto;
        break;
      case kOptTagOutput:
        if (value != "0" && value != "1") {
          *error = "--tag-output needs 0 or 1, got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->tag_output = value == "1";
        break;
      default:
        *error = "unknown option '" + arg + "'";
        return ParseResult::kUsageError;
    }
  }
  *error = CheckJob(*opts, have_n, have_addr);
  if (!error->empty()) return ParseResult::kUsageError;
  if (optind >= argc) {
    *error = "no program given";
    return ParseResult::kUsageError;
  }
  opts->argv.assign(argv + optind, argv + argc);
  std::optional<std::string> resolved = ResolveProgram(opts->argv[0]);
  if (!resolved) {
    *error = "program '" + opts->argv[0] + "' not found or not executable";
    return ParseResult::kUsageError;
  }
  opts->program_path = *resolved;
  return ParseResult::kOk;
}

}  // namespace hcomm_run
