#include "tools/hcomm_run_options.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace hcomm_run {

const char kUsage[] =
    "usage: hcomm_run -n N [--timeout S] [--port P] [--bind-to auto|core|none]\n"
    "                 [--tag-output=0|1] -- PROG [ARGS...]\n"
    "       hcomm_run --nnodes N --node-rank R --master-addr A --master-port P\n"
    "                 -n LOCAL [options] -- PROG [ARGS...]\n"
    "       hcomm_run --hostfile FILE --master-port P [-n LOCAL] [options]\n"
    "                 -- PROG [ARGS...]\n"
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
    "Hostfile: run the same command on every host. FILE lists the hosts, one\n"
    "per line: 'HOST', 'HOST slots=N' or 'HOST:N' (N ranks there; without\n"
    "a count, -n's or else 1); '#' starts a comment. The first host is\n"
    "--master-addr, the number of lines --nnodes, and each launcher's node\n"
    "rank is the line that names its machine (its hostname, short or FQDN,\n"
    "or an address of one of its interfaces; --node-rank R overrides).\n"
    "Ranks are numbered host by host in file order, so hosts may hold\n"
    "different counts. -n, when given, must agree with every count in FILE.\n"
    "\n"
    "options:\n"
    "  -n, --nproc N        ranks on this node (--nproc-per-node: the same)\n"
    "  --nnodes N           nodes in the job (default 1)\n"
    "  --node-rank R        this node's index, 0 <= R < N (default 0; with\n"
    "                       --hostfile, the line that names this machine)\n"
    "  --master-addr A      where rank 0 (on node 0) serves the rendezvous\n"
    "                       store; required with --nnodes > 1\n"
    "  --master-port P      its port (--port: the same); required with\n"
    "                       --nnodes > 1, else a free port by default\n"
    "  --hostfile FILE      the job's hosts and their ranks (see above); not\n"
    "                       with --nnodes or --master-addr\n"
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
  kOptHostfile,
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
    {"hostfile", required_argument, nullptr, kOptHostfile},
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
  if (!have_n && o.hostfile.empty()) return "missing -n N";
  const std::string nodes =
      o.hostfile.empty() ? "--nnodes " + std::to_string(o.nnodes)
                         : "--hostfile " + o.hostfile + " (" + std::to_string(o.nnodes) + " hosts)";
  if (o.node_rank >= o.nnodes) {
    return "--node-rank " + std::to_string(o.node_rank) + " is out of range for " +
           (o.hostfile.empty()
                ? nodes
                : "the " + std::to_string(o.nnodes) + " hosts of --hostfile " + o.hostfile) +
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

// --- hostfiles ---------------------------------------------------------------

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

// A host name as matched: lower case, without a final '.'.
std::string CanonicalName(const std::string& name) {
  std::string s = Lower(name);
  if (s.size() > 1 && s.back() == '.') s.pop_back();
  return s;
}

// What a host may be called: letters, digits and "-._" (names), ':' and
// '%' (IPv6 addresses and their zones).
bool IsHostName(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || strchr("-._:%", c) != nullptr;
  });
}

std::string NumericAddress(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

bool IsNumericAddress(const std::string& host) {
  addrinfo hints = {};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  freeaddrinfo(res);
  return true;
}

// Reads --hostfile and finds this node in it: sets nnodes, node_rank
// (unless `have_node_rank`), nranks, node_slots and master_addr. Empty when
// all is well.
std::string ApplyHostfile(Options* o, bool have_n, bool have_node_rank, const HostLookup& lookup) {
  std::string error;
  std::optional<Hostfile> file = ReadHostfile(o->hostfile, &error);
  if (!file) return error;
  o->node_slots.clear();
  for (HostfileEntry& e : file->hosts) {
    if (have_n && !e.slots_given) e.slots = o->nranks;
    if (have_n && e.slots != o->nranks) {
      return file->path + ":" + std::to_string(e.line) + ": host '" + e.host + "' has " +
             std::to_string(e.slots) + " slots, but -n " + std::to_string(o->nranks) +
             " gives every host " + std::to_string(o->nranks) +
             "; leave -n out to take the counts from the file, or make them agree";
    }
    o->node_slots.push_back(e.slots);
  }
  o->nnodes = static_cast<int>(file->hosts.size());
  o->master_addr = file->hosts[0].host;
  if (!have_node_rank) {
    const bool with_fqdn = std::any_of(file->hosts.begin(), file->hosts.end(),
                                       [](const auto& e) { return !IsNumericAddress(e.host); });
    std::optional<int> r = MatchHostfile(*file, lookup.local(with_fqdn), lookup.resolve, &error);
    if (!r) return error;
    o->node_rank = *r;
  }
  // Out of range is CheckJob's to say.
  if (o->node_rank < o->nnodes) o->nranks = o->node_slots[o->node_rank];
  return "";
}

}  // namespace

ParseResult ParseArgs(int argc, char** argv, Options* opts, std::string* error,
                      const HostLookup* lookup) {
  bool have_n = false;
  bool have_addr = false;
  bool have_nnodes = false;
  bool have_node_rank = false;
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
        have_nnodes = true;
        break;
      }
      case kOptNodeRank: {
        std::optional<long> r = ParseInt(value.c_str(), 0, kMaxNodes - 1);
        if (!r) {
          *error = "--node-rank needs an integer from 0 to --nnodes - 1, got '" + value + "'";
          return ParseResult::kUsageError;
        }
        opts->node_rank = static_cast<int>(*r);
        have_node_rank = true;
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
      case kOptHostfile:
        if (value.empty()) {
          *error = "--hostfile needs a file name";
          return ParseResult::kUsageError;
        }
        opts->hostfile = value;
        break;
      default:
        *error = "unknown option '" + arg + "'";
        return ParseResult::kUsageError;
    }
  }
  if (!opts->hostfile.empty()) {
    if (have_nnodes || have_addr) {
      *error = std::string("--hostfile and ") + (have_nnodes ? "--nnodes" : "--master-addr") +
               " conflict: the hostfile's lines are the nodes, the first of them node 0";
      return ParseResult::kUsageError;
    }
    const HostLookup system;
    *error = ApplyHostfile(opts, have_n, have_node_rank, lookup != nullptr ? *lookup : system);
    if (!error->empty()) return ParseResult::kUsageError;
    have_addr = true;
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

std::optional<Hostfile> ParseHostfile(const std::string& path, const std::string& text,
                                      std::string* error) {
  Hostfile file;
  file.path = path;
  std::map<std::string, int> line_of;  // CanonicalName(host) -> its line
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;  // blank or only a comment
    HostfileEntry e;
    e.line = number;
    // HOST, HOST:N, [V6] or [V6]:N; a bare V6 address has several ':'.
    std::string count;
    bool have_count = false;
    if (word[0] == '[') {
      const size_t close = word.find(']');
      if (close == std::string::npos || (close + 1 < word.size() && word[close + 1] != ':')) {
        *error = where + "'" + word + "' is not a host ('[IPV6]' or '[IPV6]:N')";
        return std::nullopt;
      }
      e.host = word.substr(1, close - 1);
      have_count = close + 1 < word.size();
      if (have_count) count = word.substr(close + 2);
    } else if (std::count(word.begin(), word.end(), ':') == 1) {
      const size_t colon = word.find(':');
      e.host = word.substr(0, colon);
      count = word.substr(colon + 1);
      have_count = true;
    } else {
      e.host = word;
    }
    if (!IsHostName(e.host)) {
      *error = where + "'" + word +
               "' is not a host name or address (want 'HOST', 'HOST slots=N' or 'HOST:N')";
      return std::nullopt;
    }
    while (words >> word) {
      if (word.compare(0, 6, "slots=") != 0) {
        *error = where + "unexpected '" + word + "' after host '" + e.host +
                 "' (want 'HOST', 'HOST slots=N' or 'HOST:N')";
        return std::nullopt;
      }
      if (have_count) {
        *error = where + "host '" + e.host + "' has two slot counts";
        return std::nullopt;
      }
      count = word.substr(6);
      have_count = true;
    }
    if (have_count) {
      std::optional<long> n = ParseInt(count.c_str(), 1, kMaxRanks);
      if (!n) {
        *error = where + "host '" + e.host + "': the slot count needs an integer from 1 to " +
                 std::to_string(kMaxRanks) + ", got '" + count + "'";
        return std::nullopt;
      }
      e.slots = static_cast<int>(*n);
      e.slots_given = true;
    }
    const auto [seen, is_new] = line_of.emplace(CanonicalName(e.host), number);
    if (!is_new) {
      *error = where + "host '" + e.host + "' is listed twice (also on line " +
               std::to_string(seen->second) + "); give each host one line with its slots";
      return std::nullopt;
    }
    if (file.hosts.size() == static_cast<size_t>(kMaxNodes)) {
      *error = where + "more than " + std::to_string(kMaxNodes) + " hosts";
      return std::nullopt;
    }
    file.hosts.push_back(std::move(e));
  }
  if (file.hosts.empty()) {
    *error = path + ": no hosts in the file (want one per line: 'HOST', 'HOST slots=N' or " +
             "'HOST:N')";
    return std::nullopt;
  }
  return file;
}

std::optional<Hostfile> ReadHostfile(const std::string& path, std::string* error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *error = "cannot read --hostfile " + path + ": " + strerror(errno);
    return std::nullopt;
  }
  if (S_ISDIR(st.st_mode)) {
    *error = "cannot read --hostfile " + path + ": it is a directory";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read --hostfile " + path + ": " + strerror(errno);
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    *error = "cannot read --hostfile " + path;
    return std::nullopt;
  }
  return ParseHostfile(path, text.str(), error);
}

std::optional<int> MatchHostfile(const Hostfile& file, const LocalHost& local,
                                 const Resolver& resolve, std::string* error) {
  std::vector<std::string> names, addresses;
  for (const std::string& n : local.names) names.push_back(CanonicalName(n));
  for (const std::string& a : local.addresses) addresses.push_back(Lower(a));
  std::optional<int> found;
  std::string unresolved;
  for (size_t i = 0; i < file.hosts.size(); ++i) {
    const HostfileEntry& e = file.hosts[i];
    bool mine = std::find(names.begin(), names.end(), CanonicalName(e.host)) != names.end();
    if (!mine) {
      const std::vector<std::string> addrs = resolve(e.host);
      if (addrs.empty()) {
        unresolved += std::string(unresolved.empty() ? "" : ", ") + "'" + e.host + "' (line " +
                      std::to_string(e.line) + ")";
      }
      for (const std::string& a : addrs) {
        mine = mine || std::find(addresses.begin(), addresses.end(), Lower(a)) != addresses.end();
      }
    }
    if (!mine) continue;
    if (found) {
      const HostfileEntry& first = file.hosts[*found];
      *error = file.path + ":" + std::to_string(e.line) + ": '" + e.host +
               "' names this machine, and so does line " + std::to_string(first.line) + " ('" +
               first.host + "'); list each host once, or give --node-rank R to choose one";
      return std::nullopt;
    }
    found = static_cast<int>(i);
  }
  if (found) return found;
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s.empty() ? std::string("none") : s;
  };
  *error = file.path + ": no line names this machine (its names: " + join(local.names) +
           "; its addresses: " + join(local.addresses) + ")" +
           (unresolved.empty() ? "" : "; these hosts do not resolve: " + unresolved) +
           "; add its line, or give --node-rank R";
  return std::nullopt;
}

LocalHost ThisHost(bool with_fqdn) {
  LocalHost me;
  char buf[256] = "";
  if (gethostname(buf, sizeof buf - 1) == 0 && buf[0] != '\0') {
    const std::string name = buf;
    me.names.push_back(name);
    const std::string short_name = name.substr(0, name.find('.'));
    if (short_name != name && !short_name.empty()) me.names.push_back(short_name);
    if (with_fqdn) {
      addrinfo hints = {};
      hints.ai_flags = AI_CANONNAME;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      if (getaddrinfo(name.c_str(), nullptr, &hints, &res) == 0) {
        if (res->ai_canonname != nullptr &&
            CanonicalName(res->ai_canonname) != CanonicalName(name)) {
          me.names.push_back(res->ai_canonname);
        }
        freeaddrinfo(res);
      }
    }
  }
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (const ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      const std::string a = NumericAddress(i->ifa_addr);
      if (!a.empty() &&
          std::find(me.addresses.begin(), me.addresses.end(), a) == me.addresses.end()) {
        me.addresses.push_back(a);
      }
    }
    freeifaddrs(ifs);
  }
  return me;
}

std::vector<std::string> ResolveHost(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  // A numeric address first, so that a hostfile of addresses asks no DNS.
  hints.ai_flags = AI_NUMERICHOST;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) {
    hints.ai_flags = 0;
    res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  }
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const std::string s = NumericAddress(a->ai_addr);
    if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace hcomm_run
