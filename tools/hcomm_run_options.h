// hcomm_run's command line: the options, their checks and the usage text,
// and the hostfile (--hostfile: which node of the job this machine is).
// Parsed with getopt_long (torchrun's flag names for a multi-host job). The
// only I/O is reading HCOMM_JOB_TOKEN and $PATH and, with --hostfile, the
// file and this machine's names and addresses (gethostname, getifaddrs,
// getaddrinfo); the caller decides what to print.
//
// Example:
//   hcomm_run::Options opts;
//   std::string error;
//   switch (hcomm_run::ParseArgs(argc, argv, &opts, &error)) {
//     case hcomm_run::ParseResult::kOk: break;             // run the job
//     case hcomm_run::ParseResult::kHelp: /* print kUsage to stdout */ return 0;
//     case hcomm_run::ParseResult::kUsageError:            // print error + kUsage to stderr
//       return hcomm_run::kExitUsage;
//   }
//
// The hostfile mode: the same command on every host,
//   hcomm_run --hostfile hosts --master-port 29500 -- ./app
// with `hosts` listing one host per line (see ParseHostfile); each launcher
// finds its own line (see MatchHostfile) and takes --nnodes, --node-rank,
// -n and --master-addr from the file.
//
// THREAD SAFETY: ParseArgs uses getopt_long's globals (optind, optarg, ...):
// call it from one thread at a time. The hostfile functions are safe to
// call from any thread.
#ifndef HCOMM_TOOLS_HCOMM_RUN_OPTIONS_H_
#define HCOMM_TOOLS_HCOMM_RUN_OPTIONS_H_

#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace hcomm_run {

constexpr int kMaxRanks = 1024;   // local ranks (-n) per launcher
constexpr int kMaxNodes = 65536;  // --nnodes
constexpr int kExitUsage = 2;

// The whole --help text (ends with a newline).
extern const char kUsage[];

struct Options {
  int nranks = 0;  // -n / --nproc / --nproc-per-node: ranks on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int port = 0;  // --port / --master-port; 0: pick a free one (one node only)
  std::optional<double> timeout_s;
  // --bind-to: core pins each rank to one CPU, none leaves them to the
  // kernel, auto (the default) is core where the ranks outnumber the CPUs
  // this launcher may use, none otherwise.
  enum class Bind { kAuto, kCore, kNone } bind = Bind::kAuto;
  bool tag_output = true;  // --tag-output: prefix lines with "[rank R] "
  std::string hostfile;    // --hostfile: the file as given; empty without one
  // With --hostfile: the ranks of every node, in file order (nnodes
  // entries; nranks is node_rank's). Empty: every node has nranks.
  std::vector<int> node_slots;
  std::string program_path;       // Resolved path that is exec'd.
  std::vector<std::string> argv;  // argv[0] is PROG as the user wrote it.

  // The global rank of this node's local rank `local`, and the job's size:
  // nodes are numbered in order, each holding a block of consecutive ranks.
  int GlobalRank(int local) const {
    if (node_slots.empty()) return node_rank * nranks + local;
    return std::accumulate(node_slots.begin(), node_slots.begin() + node_rank, 0) + local;
  }
  int WorldSize() const {
    if (node_slots.empty()) return nnodes * nranks;
    return std::accumulate(node_slots.begin(), node_slots.end(), 0);
  }
};

// ---------------------------------------------------------------------------
// Hostfiles.

// One host of a hostfile.
struct HostfileEntry {
  std::string host;          // as written (an IPv6 address without its [])
  int slots = 1;             // ranks on that host
  bool slots_given = false;  // the line says slots=N or HOST:N
  int line = 0;              // its line number in the file, from 1
};

struct Hostfile {
  std::string path;                  // as given, for messages
  std::vector<HostfileEntry> hosts;  // node R is hosts[R]
};

// Parses `text`, the contents of hostfile `path` (which only names it in
// messages). One host per line, in the forms MPI launchers take:
//   HOST             one slot (or -n's count, see ParseArgs)
//   HOST slots=N     N slots (Open MPI, DeepSpeed)
//   HOST:N           N slots (MPICH)
// with 1 <= N <= kMaxRanks. HOST is a name or an address; an IPv6 address
// is written as it is (it has more than one ':', so takes no :N) or in [],
// as in [fe80::1]:2. '#' starts a comment, to the end of the line; blank
// lines are skipped. nullopt with `*error` set ("PATH:LINE: what is wrong")
// for anything else on a line, a bad N, a host listed twice (names compared
// without regard to case), no host at all or more than kMaxNodes.
std::optional<Hostfile> ParseHostfile(const std::string& path, const std::string& text,
                                      std::string* error);

// Reads the file `path` and parses it as ParseHostfile does.
std::optional<Hostfile> ReadHostfile(const std::string& path, std::string* error);

// What this machine is called, to find its line in a hostfile.
struct LocalHost {
  std::vector<std::string> names;      // e.g. its hostname, short and FQDN
  std::vector<std::string> addresses;  // numeric, as inet_ntop writes them
};

// A host name or address -> its addresses (numeric, as inet_ntop writes
// them); empty when it does not resolve.
using Resolver = std::function<std::vector<std::string>(const std::string& host)>;

// The node rank of this machine in `file`: the index of the one line that
// names it. A line names it when its host equals one of `local.names`
// (without regard to case or a final '.') or one of the addresses
// `resolve(host)` gives is in `local.addresses`. nullopt with `*error` set
// when no line names it (the message lists its names and addresses, and
// the hosts that did not resolve) or when two lines do (it names both).
std::optional<int> MatchHostfile(const Hostfile& file, const LocalHost& local,
                                 const Resolver& resolve, std::string* error);

// This machine: gethostname() and its short form (to the first '.'),
// with `with_fqdn` also the canonical name getaddrinfo gives for it (which
// may ask DNS), and the addresses of every interface (getifaddrs, loopback
// included).
LocalHost ThisHost(bool with_fqdn);

// getaddrinfo(): a numeric address without asking DNS, a name as the
// system resolves it (/etc/hosts, DNS, ...).
std::vector<std::string> ResolveHost(const std::string& host);

// Where ParseArgs learns what this machine is called (tests pass their own).
struct HostLookup {
  std::function<LocalHost(bool with_fqdn)> local = ThisHost;
  Resolver resolve = ResolveHost;
};

enum class ParseResult {
  kOk,          // `opts` is filled and checked; PROG resolved
  kHelp,        // -h/--help was given: print kUsage to stdout, exit 0
  kUsageError,  // `*error` says what is wrong (one line, no "hcomm_run: ")
};

// Parses argv (argv[0] is the launcher's name). Options end at "--" or at
// the first word that is not one (PROG); "--opt=value", "--opt value" and
// "-nN" all work. With --nnodes > 1, --master-addr, --master-port and a
// non-empty HCOMM_JOB_TOKEN in the environment are required.
//
// --hostfile FILE (read and parsed as ParseHostfile says) takes the place
// of --nnodes (the number of hosts) and --master-addr (the first host), and
// giving either with it is an error. The node rank is the line that names
// this machine (MatchHostfile, through `lookup`; nullptr: this machine's
// own names and the system resolver) unless --node-rank R is given, which
// then wins and is only checked against the number of hosts. The node's
// ranks (-n) are its line's slots; -n N, when given, is the count of every
// line that has none (1 without -n) and must equal every count a line does
// give, so that every host computes the same layout from the same command.
// Ranks are numbered host by host in file order: node R's first rank is
// the sum of the slots before it, WORLD_SIZE the sum of all. With more
// than one host, --master-port and HCOMM_JOB_TOKEN are required as with
// --nnodes > 1.
ParseResult ParseArgs(int argc, char** argv, Options* opts, std::string* error,
                      const HostLookup* lookup = nullptr);

}  // namespace hcomm_run

#endif  // HCOMM_TOOLS_HCOMM_RUN_OPTIONS_H_
