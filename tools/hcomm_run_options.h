// hcomm_run's command line: the options, their checks and the usage text.
// Parsed with getopt_long (torchrun's flag names for a multi-host job); no
// I/O besides reading HCOMM_JOB_TOKEN and $PATH, so the caller decides what
// to print.
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
// THREAD SAFETY: ParseArgs uses getopt_long's globals (optind, optarg, ...):
// call it from one thread at a time.
#ifndef HCOMM_TOOLS_HCOMM_RUN_OPTIONS_H_
#define HCOMM_TOOLS_HCOMM_RUN_OPTIONS_H_

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
  std::string program_path;       // Resolved path that is exec'd.
  std::vector<std::string> argv;  // argv[0] is PROG as the user wrote it.

  // The global rank of this node's local rank `local`, and the job's size.
  int GlobalRank(int local) const { return node_rank * nranks + local; }
  int WorldSize() const { return nnodes * nranks; }
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
ParseResult ParseArgs(int argc, char** argv, Options* opts, std::string* error);

}  // namespace hcomm_run

#endif  // HCOMM_TOOLS_HCOMM_RUN_OPTIONS_H_
