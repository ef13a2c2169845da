// Unit tests of hcomm_run's command line and of what it gives each rank
// (hcomm_run_options.h, hcomm_run_env.h). The launcher as a whole, with real
// processes: hcomm_run_test.sh.
#include <stdlib.h>

#include <algorithm>
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

Parsed Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "hcomm_run");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Parsed p;
  p.result = ParseArgs(static_cast<int>(args.size()), argv.data(), &p.opts, &p.error);
  return p;
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

}  // namespace
}  // namespace hcomm_run
