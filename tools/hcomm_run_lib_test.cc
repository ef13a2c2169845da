// Unit tests of hcomm_run's command line and of what it gives each rank
// (hcomm_run_options.h, hcomm_run_env.h). The launcher as a whole, with real
// processes: hcomm_run_test.sh.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/hcomm_run_env.h"
#include "tools/hcomm_run_options.h"

namespace hcomm_run {
namespace {

struct Parsed {
  ParseResult result;
  Options opts;
  std::string error;
};

Parsed Parse(std::vector<std::string> args, const HostLookup* lookup = nullptr) {
  args.insert(args.begin(), "hcomm_run");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Parsed p;
  p.result = ParseArgs(static_cast<int>(args.size()), argv.data(), &p.opts, &p.error, lookup);
  return p;
}

// A machine called n1 (n1.example.com) with 10.0.0.1 on its interface, and
// a resolver that knows the names of the tests' hosts.
const std::map<std::string, std::vector<std::string>> kDns = {
    {"n1", {"10.0.0.1"}},       {"n1.example.com", {"10.0.0.1"}},   {"n2", {"10.0.0.2"}},
    {"n3", {"10.0.0.3"}},       {"gpu-a", {"fd00::1", "10.0.0.1"}}, {"10.0.0.1", {"10.0.0.1"}},
    {"10.0.0.2", {"10.0.0.2"}}, {"10.0.0.3", {"10.0.0.3"}},         {"fd00::1", {"fd00::1"}},
};
std::vector<std::string> FakeResolve(const std::string& host) {
  auto it = kDns.find(host);
  return it == kDns.end() ? std::vector<std::string>{} : it->second;
}
LocalHost N1() { return {{"n1", "n1.example.com"}, {"127.0.0.1", "10.0.0.1", "fd00::1"}}; }
HostLookup N1Lookup() {
  return {[](bool) { return N1(); }, FakeResolve};
}

// Writes `text` to a fresh file under the test's temporary folder.
std::string WriteFile(const std::string& text) {
  static int count = 0;
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/hostfile." +
                           std::to_string(getpid()) + "." + std::to_string(count++);
  std::ofstream(path) << text;
  return path;
}

bool Has(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

class HcommRunTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("HCOMM_JOB_TOKEN"); }
  void TearDown() override { unsetenv("HCOMM_JOB_TOKEN"); }
};

TEST_F(HcommRunTest, OneNodeDefaults) {
  Parsed p = Parse({"-n", "3", "--", "/bin/true", "-x"});
  ASSERT_EQ(p.result, ParseResult::kOk) << p.error;
  EXPECT_EQ(p.opts.nranks, 3);
  EXPECT_EQ(p.opts.nnodes, 1);
  EXPECT_EQ(p.opts.node_rank, 0);
  EXPECT_EQ(p.opts.master_addr, "127.0.0.1");
  EXPECT_EQ(p.opts.port, 0);
  EXPECT_TRUE(p.opts.tag_output);
  EXPECT_FALSE(p.opts.timeout_s.has_value());
  EXPECT_EQ(p.opts.bind, Options::Bind::kAuto);
  EXPECT_EQ(p.opts.argv, (std::vector<std::string>{"/bin/true", "-x"}));
  EXPECT_EQ(p.opts.program_path, "/bin/true");
}

TEST_F(HcommRunTest, EveryFormOfEveryOption) {
  setenv("HCOMM_JOB_TOKEN", "t", 1);
  Parsed p = Parse({"--nnodes=4", "--node-rank", "3", "--master-addr=node0", "--master-port",
                    "29500", "--nproc-per-node=2", "--timeout=1.5", "--bind-to", "core",
                    "--tag-output=0", "/bin/true"});
  ASSERT_EQ(p.result, ParseResult::kOk) << p.error;
  EXPECT_EQ(p.opts.nnodes, 4);
  EXPECT_EQ(p.opts.node_rank, 3);
  EXPECT_EQ(p.opts.master_addr, "node0");
  EXPECT_EQ(p.opts.port, 29500);
  EXPECT_EQ(p.opts.nranks, 2);
  EXPECT_EQ(p.opts.timeout_s, 1.5);
  EXPECT_EQ(p.opts.bind, Options::Bind::kCore);
  EXPECT_FALSE(p.opts.tag_output);
  EXPECT_EQ(p.opts.GlobalRank(1), 7);
  EXPECT_EQ(p.opts.WorldSize(), 8);

  Parsed u = Parse({"--nnodes", "4", "--node_rank=2", "--master_addr", "node0", "--master_port=9",
                    "--nproc_per_node", "3", "/bin/true"});
  ASSERT_EQ(u.result, ParseResult::kOk) << u.error;
  EXPECT_EQ(u.opts.node_rank, 2);
  EXPECT_EQ(u.opts.master_addr, "node0");
  EXPECT_EQ(u.opts.port, 9);
  EXPECT_EQ(u.opts.nranks, 3);

  Parsed q = Parse({"-n4", "--port=7", "/bin/true"});
  ASSERT_EQ(q.result, ParseResult::kOk) << q.error;
  EXPECT_EQ(q.opts.nranks, 4);
  EXPECT_EQ(q.opts.port, 7);
}

TEST_F(HcommRunTest, UsageErrorsSayWhat) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--", "/bin/true"}, "missing -n N"},
      {{"-n", "2"}, "no program given"},
      {{"-n"}, "option '-n' needs a value"},
      {{"-n", "1", "--timeout"}, "option '--timeout' needs a value"},
      {{"-n", "0", "/bin/true"}, "-n needs an integer from 1 to 1024, got '0'"},
      {{"--bogus", "/bin/true"}, "unknown option '--bogus'"},
      {{"-q", "/bin/true"}, "unknown option '-q'"},
      {{"--help=1"}, "option '--help=1' takes no value"},
      {{"--master", "x"},
       "ambiguous option '--master' (--master-addr, --master-port, --master_addr, "
       "--master_port)"},
      {{"--tag-output", "2"}, "--tag-output needs 0 or 1, got '2'"},
      {{"--master-port", "0"}, "--master-port needs an integer from 1 to 65535, got '0'"},
      {{"--nnodes", "0"}, "--nnodes needs an integer from 1 to 65536, got '0'"},
      {{"--node-rank", "1", "-n", "1", "/bin/true"},
       "--node-rank 1 is out of range for --nnodes 1 (0 to 0)"},
      {{"--nnodes", "2", "--master-port", "5", "-n", "1", "/bin/true"},
       "--nnodes 2 needs --master-addr (node 0's address, the same on every node)"},
      {{"--nnodes", "2", "--master-addr", "a", "-n", "1", "/bin/true"},
       "--nnodes 2 needs --master-port (the same on every node)"},
      {{"-n", "1", "/no/such/program"}, "program '/no/such/program' not found or not executable"},
  };
  for (const auto& [args, want] : cases) {
    Parsed p = Parse(args);
    EXPECT_EQ(p.result, ParseResult::kUsageError) << args[0];
    EXPECT_EQ(p.error, want);
  }
  EXPECT_EQ(Parse({"-h"}).result, ParseResult::kHelp);
  EXPECT_EQ(Parse({"-n", "1", "--help", "/bin/true"}).result, ParseResult::kHelp);
}

TEST_F(HcommRunTest, SeveralNodesNeedAToken) {
  const std::vector<std::string> args = {"--nnodes", "2", "--master-addr", "a", "--master-port",
                                         "5", "-n", "1", "/bin/true"};
  Parsed p = Parse(args);
  ASSERT_EQ(p.result, ParseResult::kUsageError);
  EXPECT_NE(p.error.find("export the same HCOMM_JOB_TOKEN on every node"), std::string::npos)
      << p.error;
  setenv("HCOMM_JOB_TOKEN", "", 1);
  EXPECT_EQ(Parse(args).result, ParseResult::kUsageError);
  setenv("HCOMM_JOB_TOKEN", "t", 1);
  EXPECT_EQ(Parse(args).result, ParseResult::kOk);
}

TEST_F(HcommRunTest, RankEnvironmentIsTorchruns) {
  setenv("HCOMM_JOB_TOKEN", "sekrit", 1);
  Parsed p = Parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                    "--master-port", "29500", "-n", "2", "/bin/true"});
  ASSERT_EQ(p.result, ParseResult::kOk) << p.error;
  std::string error;
  std::optional<JobIdentity> id = MakeJobIdentity(p.opts, &error);
  ASSERT_TRUE(id.has_value()) << error;
  EXPECT_EQ(id->port, 29500);
  EXPECT_EQ(id->token, "sekrit");
  std::vector<std::string> env = RankEnvironment({"A=b"}, p.opts, *id, 1);
  for (const char* want :
       {"A=b", "RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
        "NODE_RANK=1", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "HCOMM_JOB_TOKEN=sekrit"}) {
    EXPECT_TRUE(Has(env, want)) << want;
  }
  EXPECT_TRUE(Has(env, "HCOMM_JOB_KEY=" + id->job_key));
}

TEST_F(HcommRunTest, JobKeyIsSharedAcrossNodesOnlyWhenThereAreSeveral) {
  setenv("HCOMM_JOB_TOKEN", "sekrit", 1);
  Options opts;
  opts.nnodes = 2;
  opts.port = 29500;
  std::string error;
  const std::string key = MakeJobIdentity(opts, &error)->job_key;
  EXPECT_EQ(key.size(), 16u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  opts.node_rank = 1;
  EXPECT_EQ(MakeJobIdentity(opts, &error)->job_key, key);
  opts.port = 29501;
  EXPECT_NE(MakeJobIdentity(opts, &error)->job_key, key);
  opts.port = 29500;
  setenv("HCOMM_JOB_TOKEN", "other", 1);
  EXPECT_NE(MakeJobIdentity(opts, &error)->job_key, key);
  // One node: fresh for every launch, whatever the token.
  opts.nnodes = 1;
  opts.node_rank = 0;
  EXPECT_NE(MakeJobIdentity(opts, &error)->job_key, MakeJobIdentity(opts, &error)->job_key);
}

TEST_F(HcommRunTest, BaseEnvironmentDropsWhatTheLauncherSets) {
  std::vector<std::string> in = {"PATH=/bin", "RANK=9", "GROUP_RANK=9", "NODE_RANK=9",
                                 "HCOMM_RANK=9", "HCOMM_STORE_ADDR=x:1", "HCOMM_JOB_KEY=k",
                                 "HCOMM_JOB_TOKEN=t"};
  std::vector<char*> envp;
  for (std::string& e : in) envp.push_back(e.data());
  envp.push_back(nullptr);
  EXPECT_EQ(BaseEnvironment(envp.data()),
            (std::vector<std::string>{"PATH=/bin", "OMP_NUM_THREADS=1"}));
  std::string omp = "OMP_NUM_THREADS=4";
  envp.insert(envp.begin(), omp.data());
  EXPECT_EQ(BaseEnvironment(envp.data()),
            (std::vector<std::string>{"OMP_NUM_THREADS=4", "PATH=/bin"}));
}

// --- hostfiles ----------------------------------------------------------------

TEST(HostfileTest, TakesTheMpiForms) {
  std::string error;
  std::optional<Hostfile> f = ParseHostfile("hosts",
                                            "# the job's hosts\n"
                                            "\n"
                                            "n1 slots=4   # the master\n"
                                            "   n2:2\n"
                                            "\tn3\t\n"
                                            "10.0.0.9 slots=1\n"
                                            "fd00::7\n"
                                            "[fd00::8]:3\n"
                                            "[fd00::9] slots=5\n"
                                            "#n4 slots=2\n",
                                            &error);
  ASSERT_TRUE(f.has_value()) << error;
  EXPECT_EQ(f->path, "hosts");
  struct Want {
    const char* host;
    int slots;
    bool given;
    int line;
  };
  const std::vector<Want> want = {{"n1", 4, true, 3},       {"n2", 2, true, 4},
                                  {"n3", 1, false, 5},      {"10.0.0.9", 1, true, 6},
                                  {"fd00::7", 1, false, 7}, {"fd00::8", 3, true, 8},
                                  {"fd00::9", 5, true, 9}};
  ASSERT_EQ(f->hosts.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(f->hosts[i].host, want[i].host) << i;
    EXPECT_EQ(f->hosts[i].slots, want[i].slots) << i;
    EXPECT_EQ(f->hosts[i].slots_given, want[i].given) << i;
    EXPECT_EQ(f->hosts[i].line, want[i].line) << i;
  }
}

TEST(HostfileTest, ErrorsNameTheFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"n1\nn2 slots=0\n",
       "h:2: host 'n2': the slot count needs an integer from 1 to 1024, got '0'"},
      {"n1:x\n", "h:1: host 'n1': the slot count needs an integer from 1 to 1024, got 'x'"},
      {"n1:\n", "h:1: host 'n1': the slot count needs an integer from 1 to 1024, got ''"},
      {"n1 slots=1025\n",
       "h:1: host 'n1': the slot count needs an integer from 1 to 1024, got '1025'"},
      {"n1 slots=2 slots=2\n", "h:1: host 'n1' has two slot counts"},
      {"n1:2 slots=2\n", "h:1: host 'n1' has two slot counts"},
      {"\n# c\nn1 max_slots=4\n",
       "h:3: unexpected 'max_slots=4' after host 'n1' (want 'HOST', 'HOST slots=N' or "
       "'HOST:N')"},
      {"n1 4\n", "h:1: unexpected '4' after host 'n1' (want 'HOST', 'HOST slots=N' or 'HOST:N')"},
      {"slots=2\n",
       "h:1: 'slots=2' is not a host name or address (want 'HOST', 'HOST slots=N' or "
       "'HOST:N')"},
      {":2\n", "h:1: ':2' is not a host name or address (want 'HOST', 'HOST slots=N' or 'HOST:N')"},
      {"[fd00::1\n", "h:1: '[fd00::1' is not a host ('[IPV6]' or '[IPV6]:N')"},
      {"[fd00::1]2\n", "h:1: '[fd00::1]2' is not a host ('[IPV6]' or '[IPV6]:N')"},
      {"n1\nn2\n\nN1:2\n",
       "h:4: host 'N1' is listed twice (also on line 1); give each host one line with its "
       "slots"},
      {"n1.\nn1\n",
       "h:2: host 'n1' is listed twice (also on line 1); give each host one line with its "
       "slots"},
      {"", "h: no hosts in the file (want one per line: 'HOST', 'HOST slots=N' or 'HOST:N')"},
      {"# nothing\n\n  \n",
       "h: no hosts in the file (want one per line: 'HOST', 'HOST slots=N' or 'HOST:N')"},
  };
  for (const auto& [text, want] : cases) {
    std::string error;
    EXPECT_FALSE(ParseHostfile("h", text, &error).has_value()) << text;
    EXPECT_EQ(error, want) << text;
  }
  std::string error;
  EXPECT_FALSE(ReadHostfile("/no/such/hostfile", &error).has_value());
  EXPECT_EQ(error, "cannot read --hostfile /no/such/hostfile: No such file or directory");
}

TEST(HostfileTest, MatchesThisMachineByNameOrAddress) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"n2\nn1\nn3\n", 1},                    // the hostname
      {"n2\nN1.Example.COM.\n", 1},           // the FQDN, any case, final '.'
      {"10.0.0.2\n10.0.0.3\n10.0.0.1\n", 2},  // an interface's address
      {"n2\ngpu-a\n", 1},                     // a name that resolves to one
      {"[fd00::1]:2\nn2\n", 0},               // an IPv6 address
      {"n2\nunknown-host\nn1\n", 2},          // others need not resolve
  };
  for (const auto& [text, want] : cases) {
    std::string error;
    std::optional<Hostfile> f = ParseHostfile("h", text, &error);
    ASSERT_TRUE(f.has_value()) << error;
    std::optional<int> r = MatchHostfile(*f, N1(), FakeResolve, &error);
    ASSERT_TRUE(r.has_value()) << text << ": " << error;
    EXPECT_EQ(*r, want) << text;
  }
}

TEST(HostfileTest, NoLineOrTwoLinesForThisMachineAreErrors) {
  std::string error;
  std::optional<Hostfile> f = ParseHostfile("h", "# hosts\nn2 slots=2\nn3\nnowhere\n", &error);
  ASSERT_TRUE(f.has_value()) << error;
  EXPECT_FALSE(MatchHostfile(*f, N1(), FakeResolve, &error).has_value());
  EXPECT_EQ(error,
            "h: no line names this machine (its names: n1, n1.example.com; its addresses: "
            "127.0.0.1, 10.0.0.1, fd00::1); these hosts do not resolve: 'nowhere' (line 4); "
            "add its line, or give --node-rank R");
  f = ParseHostfile("h", "n2\nn1 slots=2\n\n10.0.0.1 slots=2\n", &error);
  ASSERT_TRUE(f.has_value()) << error;
  EXPECT_FALSE(MatchHostfile(*f, N1(), FakeResolve, &error).has_value());
  EXPECT_EQ(error,
            "h:4: '10.0.0.1' names this machine, and so does line 2 ('n1'); list each host "
            "once, or give --node-rank R to choose one");
  // A machine that knows nothing of itself matches nothing.
  f = ParseHostfile("h", "n1\n", &error);
  ASSERT_TRUE(f.has_value()) << error;
  EXPECT_FALSE(MatchHostfile(*f, LocalHost{}, FakeResolve, &error).has_value());
  EXPECT_EQ(error,
            "h: no line names this machine (its names: none; its addresses: none); add its "
            "line, or give --node-rank R");
}

TEST(HostfileTest, ThisHostKnowsItsNameAndLoopback) {
  const LocalHost me = ThisHost(/*with_fqdn=*/false);
  char name[256] = "";
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  ASSERT_FALSE(me.names.empty());
  EXPECT_EQ(me.names[0], name);
  EXPECT_EQ(ResolveHost("127.0.0.1"), std::vector<std::string>{"127.0.0.1"});
  EXPECT_EQ(ResolveHost("::1"), std::vector<std::string>{"::1"});
  EXPECT_EQ(ResolveHost("10.0.0.01"), std::vector<std::string>{"10.0.0.1"});
}

TEST_F(HcommRunTest, HostfileSetsTheNodesAndTheRanks) {
  setenv("HCOMM_JOB_TOKEN", "t", 1);
  const HostLookup n1 = N1Lookup();
  // Uneven slots: n2 holds ranks 0-1, n1 (this machine) 2-5, n3 6.
  const std::string file = WriteFile("n2:2\nn1 slots=4\nn3\n");
  Parsed p = Parse({"--hostfile", file, "--master-port", "29500", "--", "/bin/true"}, &n1);
  ASSERT_EQ(p.result, ParseResult::kOk) << p.error;
  EXPECT_EQ(p.opts.hostfile, file);
  EXPECT_EQ(p.opts.nnodes, 3);
  EXPECT_EQ(p.opts.node_rank, 1);
  EXPECT_EQ(p.opts.nranks, 4);
  EXPECT_EQ(p.opts.master_addr, "n2");
  EXPECT_EQ(p.opts.port, 29500);
  EXPECT_EQ(p.opts.node_slots, (std::vector<int>{2, 4, 1}));
  EXPECT_EQ(p.opts.GlobalRank(0), 2);
  EXPECT_EQ(p.opts.GlobalRank(3), 5);
  EXPECT_EQ(p.opts.WorldSize(), 7);

  std::string error;
  std::optional<JobIdentity> id = MakeJobIdentity(p.opts, &error);
  ASSERT_TRUE(id.has_value()) << error;
  std::vector<std::string> env = RankEnvironment({}, p.opts, *id, 3);
  for (const char* want : {"RANK=5", "WORLD_SIZE=7", "LOCAL_RANK=3", "LOCAL_WORLD_SIZE=4",
                           "GROUP_RANK=1", "NODE_RANK=1", "MASTER_ADDR=n2", "MASTER_PORT=29500"}) {
    EXPECT_TRUE(Has(env, want)) << want;
  }

  // --node-rank wins over the match (and needs none).
  Parsed q = Parse({"--node-rank=2", "--hostfile=" + file, "--port=9", "/bin/true"}, &n1);
  ASSERT_EQ(q.result, ParseResult::kOk) << q.error;
  EXPECT_EQ(q.opts.node_rank, 2);
  EXPECT_EQ(q.opts.nranks, 1);
  EXPECT_EQ(q.opts.GlobalRank(0), 6);
  HostLookup nowhere = {[](bool) { return LocalHost{}; }, FakeResolve};
  q = Parse({"--hostfile", file, "--node-rank", "0", "--master-port", "9", "/bin/true"}, &nowhere);
  ASSERT_EQ(q.result, ParseResult::kOk) << q.error;
  EXPECT_EQ(q.opts.nranks, 2);
  EXPECT_EQ(q.opts.GlobalRank(1), 1);

  // -n is the count of lines without one, and agrees with the others.
  const std::string plain = WriteFile("n1\nn2 slots=3\nn3\n");
  q = Parse({"--hostfile", plain, "--master-port", "9", "-n", "3", "/bin/true"}, &n1);
  ASSERT_EQ(q.result, ParseResult::kOk) << q.error;
  EXPECT_EQ(q.opts.node_slots, (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(q.opts.WorldSize(), 9);
  q = Parse({"--hostfile", plain, "--master-port", "9", "/bin/true"}, &n1);
  ASSERT_EQ(q.result, ParseResult::kOk) << q.error;
  EXPECT_EQ(q.opts.node_slots, (std::vector<int>{1, 3, 1}));
  EXPECT_EQ(q.opts.nranks, 1);

  // One host: no port or token needed, as with --nnodes 1.
  unsetenv("HCOMM_JOB_TOKEN");
  const std::string one = WriteFile("10.0.0.1 slots=2\n");
  q = Parse({"--hostfile", one, "/bin/true"}, &n1);
  ASSERT_EQ(q.result, ParseResult::kOk) << q.error;
  EXPECT_EQ(q.opts.nnodes, 1);
  EXPECT_EQ(q.opts.nranks, 2);
  EXPECT_EQ(q.opts.master_addr, "10.0.0.1");
  EXPECT_EQ(q.opts.port, 0);
}

TEST_F(HcommRunTest, HostfileUsageErrors) {
  setenv("HCOMM_JOB_TOKEN", "t", 1);
  const HostLookup n1 = N1Lookup();
  const std::string file = WriteFile("n2:2\nn1 slots=4\nn3\n");
  const std::string twice = WriteFile("n1\n10.0.0.1\n");
  const std::string bad = WriteFile("n1\nn2 slots=two\n");
  const std::string other = WriteFile("n2\nn3\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hostfile", file, "--nnodes", "3", "--master-port", "9", "/bin/true"},
       "--hostfile and --nnodes conflict: the hostfile's lines are the nodes, the first of "
       "them node 0"},
      {{"--master-addr", "n1", "--hostfile", file, "--master-port", "9", "/bin/true"},
       "--hostfile and --master-addr conflict: the hostfile's lines are the nodes, the first "
       "of them node 0"},
      {{"--hostfile=", "/bin/true"}, "--hostfile needs a file name"},
      {{"--hostfile", "/no/such/file", "/bin/true"},
       "cannot read --hostfile /no/such/file: No such file or directory"},
      {{"--hostfile", bad, "--master-port", "9", "/bin/true"},
       bad + ":2: host 'n2': the slot count needs an integer from 1 to 1024, got 'two'"},
      {{"--hostfile", file, "-n", "4", "--master-port", "9", "/bin/true"},
       file + ":1: host 'n2' has 2 slots, but -n 4 gives every host 4; leave -n out to take "
              "the counts from the file, or make them agree"},
      {{"--hostfile", file, "--node-rank", "3", "--master-port", "9", "/bin/true"},
       "--node-rank 3 is out of range for the 3 hosts of --hostfile " + file + " (0 to 2)"},
      {{"--hostfile", file, "/bin/true"},
       "--hostfile " + file + " (3 hosts) needs --master-port (the same on every node)"},
      {{"--hostfile", twice, "--master-port", "9", "/bin/true"},
       twice + ":2: '10.0.0.1' names this machine, and so does line 1 ('n1'); list each host "
               "once, or give --node-rank R to choose one"},
      {{"--hostfile", other, "--master-port", "9", "/bin/true"},
       other + ": no line names this machine (its names: n1, n1.example.com; its addresses: "
               "127.0.0.1, 10.0.0.1, fd00::1); add its line, or give --node-rank R"},
  };
  for (const auto& [args, want] : cases) {
    Parsed p = Parse(args, &n1);
    EXPECT_EQ(p.result, ParseResult::kUsageError) << args[0];
    EXPECT_EQ(p.error, want);
  }
  // Two lines naming this machine are fine when --node-rank says which.
  EXPECT_EQ(Parse({"--hostfile", twice, "--node-rank", "1", "--master-port", "9", "/bin/true"}, &n1)
                .result,
            ParseResult::kOk);
  // The token rule of --nnodes > 1.
  unsetenv("HCOMM_JOB_TOKEN");
  Parsed p = Parse({"--hostfile", file, "--master-port", "9", "/bin/true"}, &n1);
  ASSERT_EQ(p.result, ParseResult::kUsageError);
  EXPECT_EQ(p.error.rfind("--hostfile " + file + " (3 hosts): HCOMM_JOB_TOKEN is not set", 0), 0u)
      << p.error;
  EXPECT_NE(p.error.find("export the same HCOMM_JOB_TOKEN on every node"), std::string::npos);
}

}  // namespace
}  // namespace hcomm_run
