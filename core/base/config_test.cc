#include "core/base/config.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using EnvMap = std::map<std::string, std::string>;

// A fake environment over a map; never the real one.
EnvLookup FakeEnv(EnvMap vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The smallest environment that resolves: one rank, no store needed.
EnvMap SingleRank() { return {{"HCOMM_RANK", "0"}, {"HCOMM_WORLD_SIZE", "1"}}; }

void ExpectInvalid(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(p));
}

TEST(ConfigTest, KeysInApiOrder) {
  EXPECT_THAT(Config::Keys(), ElementsAre("rank", "world_size", "store_addr", "job_token",
                                          "timeout_ms", "transports", "algo", "host_id",
                                          "plugins", "fusion_bytes", "chunk_bytes", "profile",
                                          "profile_max_events", "profile_file", "compression",
                                          "delta_cache_bytes", "switch_id", "topology",
                                          "switch_link_mbit", "unexpected_bytes",
                                          "flight_recorder", "flight_recorder_file"));
}

TEST(ConfigTest, UnexpectedBytes) {
  Options o;
  EXPECT_EQ(o.unexpected_bytes, int64_t{4} << 20);
  ASSERT_TRUE(ParseOption("unexpected_bytes", "131072", &o).ok());
  EXPECT_EQ(o.unexpected_bytes, 131072);
  // Below one eager message of the largest size and its entry.
  ExpectInvalid(ParseOption("unexpected_bytes", "65536", &o), {"unexpected_bytes='65536'"});
  ExpectInvalid(ParseOption("unexpected_bytes", "lots", &o), {"unexpected_bytes='lots'"});
}

TEST(ConfigTest, FlightRecorder) {
  absl::StatusOr<Options> d = Config().Resolve(FakeEnv(SingleRank()));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->flight_recorder, 256);
  EXPECT_EQ(d->flight_recorder_file, "");
  EnvMap vars = SingleRank();
  vars["HCOMM_FLIGHT_RECORDER"] = "0";
  vars["HCOMM_FLIGHT_RECORDER_FILE"] = "/tmp/fr-%r.json";
  absl::StatusOr<Options> env = Config().Resolve(FakeEnv(vars));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->flight_recorder, 0);
  EXPECT_EQ(env->flight_recorder_file, "/tmp/fr-%r.json");
  EXPECT_EQ(env->sources["flight_recorder"], "env HCOMM_FLIGHT_RECORDER");
  Config cfg;
  ASSERT_TRUE(cfg.Set("flight_recorder", "1024").ok());
  absl::StatusOr<Options> set = cfg.Resolve(FakeEnv(vars));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->flight_recorder, 1024);
  ExpectInvalid(Config().Set("flight_recorder", "-1"), {"flight_recorder", "'-1'", "0 (off)"});
  ExpectInvalid(Config().Set("flight_recorder", "2000000"), {"flight_recorder", "2^20"});
  ExpectInvalid(Config().Set("flight_recorder_file", ""), {"flight_recorder_file", "path"});
}

TEST(ConfigTest, Compression) {
  Options o;
  EXPECT_EQ(o.compression_half, Options::Half::kNone);
  EXPECT_FALSE(o.compression_delta);
  EXPECT_EQ(o.delta_cache_bytes, int64_t{64} << 20);
  ASSERT_TRUE(ParseOption("compression", "fp16", &o).ok());
  EXPECT_EQ(o.compression_half, Options::Half::kFp16);
  EXPECT_FALSE(o.compression_delta);
  ASSERT_TRUE(ParseOption("compression", "delta,bf16", &o).ok());
  EXPECT_EQ(o.compression_half, Options::Half::kBf16);
  EXPECT_TRUE(o.compression_delta);
  ASSERT_TRUE(ParseOption("compression", "none", &o).ok());
  EXPECT_EQ(o.compression_half, Options::Half::kNone);
  EXPECT_FALSE(o.compression_delta);
  for (const char* bad : {"", "zip", "fp16,bf16", "delta,delta", "fp16,", "none,delta"}) {
    ExpectInvalid(ParseOption("compression", bad, &o), {"compression='", "fp16,delta"});
  }
  ASSERT_TRUE(ParseOption("delta_cache_bytes", "0", &o).ok());
  EXPECT_EQ(o.delta_cache_bytes, 0);
  ExpectInvalid(ParseOption("delta_cache_bytes", "-1", &o), {"delta_cache_bytes='-1'"});
  auto env = Config().Resolve([](const std::string& name) -> std::optional<std::string> {
    if (name == "HCOMM_RANK") return "0";
    if (name == "HCOMM_WORLD_SIZE") return "1";
    if (name == "HCOMM_COMPRESSION") return "fp16,delta";
    return std::nullopt;
  });
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->compression_half, Options::Half::kFp16);
  EXPECT_TRUE(env->compression_delta);
  EXPECT_EQ(env->sources.at("compression"), "env HCOMM_COMPRESSION");
}

TEST(ConfigTest, FusionBytes) {
  Options o;
  EXPECT_EQ(o.fusion_bytes, -1);  // auto
  ASSERT_TRUE(ParseOption("fusion_bytes", "0", &o).ok());
  EXPECT_EQ(o.fusion_bytes, 0);
  ASSERT_TRUE(ParseOption("fusion_bytes", "auto", &o).ok());
  EXPECT_EQ(o.fusion_bytes, -1);
  ExpectInvalid(ParseOption("fusion_bytes", "-5", &o), {"fusion_bytes='-5'", "'auto' or"});
  ExpectInvalid(ParseOption("fusion_bytes", "1MB", &o), {"fusion_bytes='1MB'"});
}

TEST(ConfigTest, ChunkBytes) {
  Options o;
  EXPECT_EQ(o.chunk_bytes, -1);  // auto
  ASSERT_TRUE(ParseOption("chunk_bytes", "65536", &o).ok());
  EXPECT_EQ(o.chunk_bytes, 65536);
  ASSERT_TRUE(ParseOption("chunk_bytes", "auto", &o).ok());
  EXPECT_EQ(o.chunk_bytes, -1);
  ExpectInvalid(ParseOption("chunk_bytes", "0", &o), {"chunk_bytes='0'", "from 4096"});
  ExpectInvalid(ParseOption("chunk_bytes", "2147483648", &o), {"chunk_bytes='2147483648'"});
}

TEST(ConfigTest, Profile) {
  Options o;
  EXPECT_FALSE(o.profile);
  EXPECT_EQ(o.profile_max_events, 131072);
  EXPECT_EQ(o.profile_file, "hcomm_profile.json");
  ASSERT_TRUE(ParseOption("profile", "1", &o).ok());
  EXPECT_TRUE(o.profile);
  ASSERT_TRUE(ParseOption("profile", "0", &o).ok());
  EXPECT_FALSE(o.profile);
  ExpectInvalid(ParseOption("profile", "yes please", &o), {"profile='yes please'", "1 (record)"});
  ExpectInvalid(ParseOption("profile_max_events", "0", &o), {"profile_max_events='0'"});
  ExpectInvalid(ParseOption("profile_file", "", &o), {"profile_file=''"});
  absl::StatusOr<Options> env = Config().Resolve(FakeEnv({{"HCOMM_RANK", "0"},
                                                          {"HCOMM_WORLD_SIZE", "1"},
                                                          {"HCOMM_PROFILE", "1"},
                                                          {"HCOMM_PROFILE_FILE", "x.json"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->profile);
  EXPECT_EQ(env->profile_file, "x.json");
  EXPECT_EQ(env->sources["profile"], "env HCOMM_PROFILE");
}

TEST(ConfigTest, EveryKeySetAndRead) {
  Config cfg;
  ASSERT_TRUE(cfg.Set("rank", "2").ok());
  ASSERT_TRUE(cfg.Set("world_size", "4").ok());
  ASSERT_TRUE(cfg.Set("store_addr", "10.0.0.1:29500").ok());
  ASSERT_TRUE(cfg.Set("job_token", "s3cret").ok());
  ASSERT_TRUE(cfg.Set("timeout_ms", "60000").ok());
  ASSERT_TRUE(cfg.Set("transports", "tcp,shm").ok());
  ASSERT_TRUE(cfg.Set("algo", "ring").ok());
  ASSERT_TRUE(cfg.Set("host_id", "node7").ok());
  ASSERT_TRUE(cfg.Set("plugins", "/opt/hcomm/lib/hcomm/plugins/libhcomm_uds.so:rel/b.so").ok());
  ASSERT_TRUE(cfg.Set("fusion_bytes", "4096").ok());
  ASSERT_TRUE(cfg.Set("chunk_bytes", "1048576").ok());
  ASSERT_TRUE(cfg.Set("profile", "1").ok());
  ASSERT_TRUE(cfg.Set("profile_max_events", "1000").ok());
  ASSERT_TRUE(cfg.Set("profile_file", "/tmp/p.json").ok());
  ASSERT_TRUE(cfg.Set("compression", "bf16").ok());
  ASSERT_TRUE(cfg.Set("delta_cache_bytes", "1024").ok());
  ASSERT_TRUE(cfg.Set("switch_id", "rack7").ok());
  ASSERT_TRUE(cfg.Set("topology", "/etc/hcomm/topo.txt").ok());
  ASSERT_TRUE(cfg.Set("switch_link_mbit", "200").ok());
  ASSERT_TRUE(cfg.Set("unexpected_bytes", "1048576").ok());
  ASSERT_TRUE(cfg.Set("flight_recorder", "64").ok());
  ASSERT_TRUE(cfg.Set("flight_recorder_file", "fr.%r.json").ok());
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv({}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->store_addr, "10.0.0.1:29500");
  EXPECT_EQ(o->job_token, "s3cret");
  EXPECT_EQ(o->timeout_ms, 60000);
  EXPECT_THAT(o->transports, ElementsAre("tcp", "shm"));
  EXPECT_EQ(o->algo, "ring");
  EXPECT_EQ(o->host_id, "node7");
  EXPECT_THAT(o->plugins, ElementsAre("/opt/hcomm/lib/hcomm/plugins/libhcomm_uds.so", "rel/b.so"));
  EXPECT_EQ(o->fusion_bytes, 4096);
  EXPECT_EQ(o->chunk_bytes, 1048576);
  EXPECT_TRUE(o->profile);
  EXPECT_EQ(o->profile_max_events, 1000);
  EXPECT_EQ(o->profile_file, "/tmp/p.json");
  EXPECT_EQ(o->compression_half, Options::Half::kBf16);
  EXPECT_EQ(o->delta_cache_bytes, 1024);
  EXPECT_EQ(o->switch_id, "rack7");
  EXPECT_EQ(o->topology, "/etc/hcomm/topo.txt");
  EXPECT_EQ(o->switch_link_mbit, 200);
  EXPECT_EQ(o->flight_recorder, 64);
  EXPECT_EQ(o->flight_recorder_file, "fr.%r.json");
  for (const std::string& k : Config::Keys()) EXPECT_EQ(o->sources[k], "config") << k;
}

TEST(ConfigTest, EveryKeyFromHcommEnv) {
  Config cfg;
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv({
      {"HCOMM_RANK", "1"},
      {"HCOMM_WORLD_SIZE", "3"},
      {"HCOMM_STORE_ADDR", "[::1]:1234"},
      {"HCOMM_JOB_TOKEN", "tok"},
      {"HCOMM_TIMEOUT_MS", "5"},
      {"HCOMM_TRANSPORTS", "ibverbs, tcp"},
      {"HCOMM_ALGO", "direct"},
      {"HCOMM_HOST_ID", "h1"},
  }));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->world_size, 3);
  EXPECT_EQ(o->store_addr, "[::1]:1234");
  EXPECT_EQ(o->job_token, "tok");
  EXPECT_EQ(o->timeout_ms, 5);
  EXPECT_THAT(o->transports, ElementsAre("ibverbs", "tcp"));
  EXPECT_EQ(o->algo, "direct");
  EXPECT_EQ(o->host_id, "h1");
  EXPECT_EQ(o->sources["rank"], "env HCOMM_RANK");
  EXPECT_EQ(o->sources["timeout_ms"], "env HCOMM_TIMEOUT_MS");
  EXPECT_EQ(o->sources["host_id"], "env HCOMM_HOST_ID");
}

// Under srun alone (no MASTER_ADDR): the store is on the step's first
// node, at the step's first reserved port or one from the job id.
TEST(ConfigTest, SrunStepGivesTheStoreAddress) {
  std::map<std::string, std::string> env = {{"SLURM_PROCID", "2"},
                                            {"SLURM_NTASKS", "4"},
                                            {"SLURM_STEP_NODELIST", "node[07-09,12],gpu3"},
                                            {"SLURM_JOB_ID", "1234"},
                                            {"SLURM_STEP_ID", "1"}};
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(env));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->store_addr, absl::StrCat("node07:", 20000 + (1234 * 64 + 1) % 20000));
  EXPECT_EQ(o->sources["store_addr"], "env SLURM_STEP_NODELIST");
  env["SLURM_STEP_RESV_PORTS"] = "12000-12003";
  env["SLURM_STEP_NODELIST"] = "n[1-2]-ib,x";
  o = Config().Resolve(FakeEnv(env));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "n1-ib:12000");
  env["SLURM_STEP_NODELIST"] = "solo";
  o = Config().Resolve(FakeEnv(env));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "solo:12000");
  // MASTER_ADDR and MASTER_PORT win.
  env["MASTER_ADDR"] = "10.0.0.9";
  env["MASTER_PORT"] = "29500";
  o = Config().Resolve(FakeEnv(env));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "10.0.0.9:29500");
  // A list it cannot read is an error naming the variable.
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  env["SLURM_STEP_NODELIST"] = "[1-2]";
  ExpectInvalid(Config().Resolve(FakeEnv(env)).status(), {"SLURM_STEP_NODELIST", "[1-2]"});
  // Outside a step (a batch script: no SLURM_STEP_NODELIST), no address.
  env.erase("SLURM_STEP_NODELIST");
  ExpectInvalid(Config().Resolve(FakeEnv(env)).status(),
                {"store_addr is not set", "SLURM_STEP_NODELIST"});
}

TEST(ConfigTest, Defaults) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(SingleRank()));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "");
  EXPECT_EQ(o->job_token, "");
  EXPECT_EQ(o->timeout_ms, 300000);
  EXPECT_THAT(o->transports, IsEmpty());
  EXPECT_EQ(o->algo, "auto");
  EXPECT_FALSE(o->host_id.empty());
  EXPECT_THAT(o->plugins, IsEmpty());
  for (const char* k : {"store_addr", "job_token", "timeout_ms", "transports", "algo", "host_id",
                        "plugins"}) {
    EXPECT_EQ(o->sources[k], "default") << k;
  }
}

TEST(ConfigTest, HostIdDefaultIsNonEmpty) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(SingleRank()));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->host_id.empty());
}

TEST(ConfigTest, ExplicitBeatsEnv) {
  Config cfg;
  ASSERT_TRUE(cfg.Set("rank", "0").ok());
  ASSERT_TRUE(cfg.Set("timeout_ms", "7").ok());
  ASSERT_TRUE(cfg.Set("store_addr", "a:1").ok());
  ASSERT_TRUE(cfg.Set("algo", "tree").ok());
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv({{"HCOMM_RANK", "1"},
                                                   {"RANK", "1"},
                                                   {"HCOMM_WORLD_SIZE", "2"},
                                                   {"HCOMM_TIMEOUT_MS", "9"},
                                                   {"HCOMM_STORE_ADDR", "b:2"},
                                                   {"HCOMM_ALGO", "ring"}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->sources["rank"], "config");
  EXPECT_EQ(o->world_size, 2);
  EXPECT_EQ(o->sources["world_size"], "env HCOMM_WORLD_SIZE");
  EXPECT_EQ(o->timeout_ms, 7);
  EXPECT_EQ(o->store_addr, "a:1");
  EXPECT_EQ(o->algo, "tree");
}

TEST(ConfigTest, ExplicitValueWinsEvenWhenEnvValueIsBad) {
  Config cfg;
  ASSERT_TRUE(cfg.Set("timeout_ms", "7").ok());
  EnvMap env = SingleRank();
  env["HCOMM_TIMEOUT_MS"] = "abc";
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv(env));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->timeout_ms, 7);
}

TEST(ConfigTest, LaterSetReplacesEarlier) {
  Config cfg;
  ASSERT_TRUE(cfg.Set("algo", "ring").ok());
  ASSERT_TRUE(cfg.Set("algo", "tree").ok());
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv(SingleRank()));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->algo, "tree");
}

// Removes the variables one by one, front first: each time the next one in
// the chain must be the one read.
void CheckChain(const std::vector<std::string>& chain, bool is_rank) {
  EnvMap env;
  for (size_t i = 0; i < chain.size(); ++i) env[chain[i]] = std::to_string(i + (is_rank ? 0 : 1));
  // The other key, so that resolution succeeds: world_size large enough /
  // rank 0; world_size > 1 needs a store.
  if (is_rank) {
    env["HCOMM_WORLD_SIZE"] = "100";
  } else {
    env["HCOMM_RANK"] = "0";
  }
  env["HCOMM_STORE_ADDR"] = "h:1";
  for (size_t i = 0; i < chain.size(); ++i) {
    SCOPED_TRACE(chain[i]);
    absl::StatusOr<Options> o = Config().Resolve(FakeEnv(env));
    ASSERT_TRUE(o.ok()) << o.status();
    const int want = static_cast<int>(i) + (is_rank ? 0 : 1);
    EXPECT_EQ(is_rank ? o->rank : o->world_size, want);
    EXPECT_EQ(o->sources[is_rank ? "rank" : "world_size"], "env " + chain[i]);
    env.erase(chain[i]);
  }
}

TEST(ConfigTest, RankFallbackChainOrder) {
  CheckChain({"HCOMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, true);
}

TEST(ConfigTest, WorldSizeFallbackChainOrder) {
  CheckChain({"HCOMM_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"},
             false);
}

TEST(ConfigTest, EmptyEnvValueCountsAsMissing) {
  absl::StatusOr<Options> o = Config().Resolve(
      FakeEnv({{"HCOMM_RANK", ""}, {"RANK", ""}, {"PMI_RANK", "0"}, {"WORLD_SIZE", "1"},
               {"HCOMM_TIMEOUT_MS", ""}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->sources["rank"], "env PMI_RANK");
  EXPECT_EQ(o->timeout_ms, 300000);
}

TEST(ConfigTest, FirstFoundVariableIsValidatedNotSkipped) {
  absl::StatusOr<Options> o =
      Config().Resolve(FakeEnv({{"RANK", "x"}, {"PMI_RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ExpectInvalid(o.status(), {"RANK='x'"});
}

TEST(ConfigTest, StoreAddrFromMasterAddrAndPort) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "node0:29500");
  EXPECT_EQ(o->sources["store_addr"], "env MASTER_ADDR:MASTER_PORT");
}

TEST(ConfigTest, HcommStoreAddrBeatsMaster) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv({{"RANK", "1"},
                                                        {"WORLD_SIZE", "2"},
                                                        {"HCOMM_STORE_ADDR", "s:1"},
                                                        {"MASTER_ADDR", "node0"},
                                                        {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "s:1");
  EXPECT_EQ(o->sources["store_addr"], "env HCOMM_STORE_ADDR");
}

TEST(ConfigTest, MasterAddrWithoutMasterPort) {
  absl::StatusOr<Options> o = Config().Resolve(
      FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}}));
  ExpectInvalid(o.status(), {"MASTER_ADDR='node0'", "MASTER_PORT is not"});
}

TEST(ConfigTest, MasterPortWithoutMasterAddr) {
  absl::StatusOr<Options> o = Config().Resolve(
      FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}, {"MASTER_ADDR", ""}}));
  ExpectInvalid(o.status(), {"MASTER_PORT='29500'", "MASTER_ADDR is not"});
}

TEST(ConfigTest, BadMasterPort) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n"}, {"MASTER_PORT", "99999"}}));
  ExpectInvalid(o.status(), {"MASTER_ADDR:MASTER_PORT", "n:99999"});
}

TEST(ConfigTest, UnknownKeyNamesKeyAndListsValidKeys) {
  Config cfg;
  absl::Status s = cfg.Set("timeout", "5");
  ExpectInvalid(s, {"'timeout'", "rank, world_size, store_addr, job_token, timeout_ms, "
                                  "transports, algo, host_id, plugins"});
  Options opts;
  ExpectInvalid(ParseOption("Rank", "1", &opts), {"'Rank'"});
}

struct BadCase {
  std::string key;
  std::string value;
  std::string expected;  // part of the message saying what is expected
};

class BadValueTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadValueTest, SetRejectsNamingKeyValueAndExpectation) {
  const BadCase& c = GetParam();
  Config cfg;
  absl::Status s = cfg.Set(c.key, c.value);
  ExpectInvalid(s, {c.key, "'" + c.value + "'", c.expected});
  // A failed Set changes nothing.
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv(SingleRank()));
  ASSERT_TRUE(o.ok()) << o.status();
  for (const std::string& k : Config::Keys()) EXPECT_NE(o->sources[k], "config") << k;
}

TEST_P(BadValueTest, HcommEnvRejectsNamingVariable) {
  const BadCase& c = GetParam();
  if (c.value.empty()) GTEST_SKIP() << "empty env values count as unset";
  EnvMap env = SingleRank();
  std::string var = "HCOMM_" + c.key;
  for (char& ch : var) ch = static_cast<char>(toupper(static_cast<unsigned char>(ch)));
  env[var] = c.value;
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(env));
  ExpectInvalid(o.status(), {var, c.value, c.expected});
}

TEST_P(BadValueTest, ParseOptionLeavesOptionsUnchanged) {
  const BadCase& c = GetParam();
  Options opts;
  opts.rank = 3;
  opts.world_size = 8;
  opts.store_addr = "x:1";
  opts.transports = {"tcp"};
  opts.host_id = "h";
  ExpectInvalid(ParseOption(c.key, c.value, &opts), {c.key, c.expected});
  EXPECT_EQ(opts.rank, 3);
  EXPECT_EQ(opts.world_size, 8);
  EXPECT_EQ(opts.store_addr, "x:1");
  EXPECT_EQ(opts.timeout_ms, 300000);
  EXPECT_THAT(opts.transports, ElementsAre("tcp"));
  EXPECT_EQ(opts.algo, "auto");
  EXPECT_EQ(opts.host_id, "h");
}

INSTANTIATE_TEST_SUITE_P(
    AllKeys, BadValueTest,
    ::testing::Values(
        BadCase{"rank", "abc", "an integer from 0 to 1048575"},
        BadCase{"rank", "-1", "an integer from 0 to"},
        BadCase{"rank", "1x", "an integer from 0 to"},
        BadCase{"rank", " 1", "an integer from 0 to"},
        BadCase{"rank", "+1", "an integer from 0 to"},
        BadCase{"rank", "", "an integer from 0 to"},
        BadCase{"rank", "1048576", "an integer from 0 to"},
        BadCase{"rank", "99999999999999999999999", "an integer from 0 to"},
        BadCase{"world_size", "0", "an integer from 1 to 1048576"},
        BadCase{"switch_link_mbit", "-5", "Mbit/s from 0"},
        BadCase{"switch_link_mbit", "fast", "Mbit/s from 0"},
        BadCase{"world_size", "1048577", "an integer from 1 to 1048576"},
        BadCase{"world_size", "4294967297", "an integer from 1 to"},
        BadCase{"world_size", "2.0", "an integer from 1 to"},
        BadCase{"store_addr", "nohostport", "host:port"},
        BadCase{"store_addr", "h:70000", "port"},
        BadCase{"store_addr", "h:", "port"},
        BadCase{"store_addr", "", "host:port"},
        BadCase{"store_addr", "[]:5", "host is empty"},
        BadCase{"timeout_ms", "abc", "a positive integer"},
        BadCase{"timeout_ms", "0", "a positive integer"},
        BadCase{"timeout_ms", "-5", "a positive integer"},
        BadCase{"timeout_ms", "10ms", "a positive integer"},
        BadCase{"timeout_ms", "9223372036854775808", "a positive integer"},
        BadCase{"transports", "u-d-p", "'u-d-p' is not a name"},
        BadCase{"compression", "gzip", "none, fp16, bf16, delta"},
        BadCase{"switch_id", "", "a non-empty switch"},
        BadCase{"topology", "", "a topology file"},
        BadCase{"delta_cache_bytes", "lots", "a number of bytes"},
        BadCase{"transports", "shm,tcp,shm", "'shm' appears twice"},
        BadCase{"transports", "shm,,tcp", "empty item"},
        BadCase{"transports", "tcp,", "empty item"},
        BadCase{"transports", "TCP", "transport names ([a-z0-9_]"},
        BadCase{"transports", std::string(32, 'a'), "is not a name"},
        BadCase{"plugins", "/a.so::/b.so", "colon-separated list of plugin paths (empty item)"},
        BadCase{"plugins", "/a.so:", "empty item"},
        BadCase{"algo", "fast", "one of auto, ring, tree, direct"},
        BadCase{"algo", "", "one of auto, ring, tree, direct"},
        BadCase{"host_id", "", "non-empty"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.key + "_" + std::to_string(info.index);
    });

TEST(ConfigTest, EnvErrorMessageIsExact) {
  EnvMap env = SingleRank();
  env["HCOMM_TIMEOUT_MS"] = "abc";
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv(env));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().message(), "HCOMM_TIMEOUT_MS='abc' is not a positive integer");
}

TEST(ConfigTest, FallbackEnvErrorNamesVariable) {
  absl::StatusOr<Options> o =
      Config().Resolve(FakeEnv({{"HCOMM_RANK", "0"}, {"SLURM_NTASKS", "zero"}}));
  ExpectInvalid(o.status(), {"SLURM_NTASKS='zero'", "an integer from 1 to"});
}

TEST(ConfigTest, IntegerLimitsAccepted) {
  Options opts;
  ASSERT_TRUE(ParseOption("world_size", "1048576", &opts).ok());
  EXPECT_EQ(opts.world_size, 1 << 20);
  ASSERT_TRUE(ParseOption("rank", "1048575", &opts).ok());
  EXPECT_EQ(opts.rank, (1 << 20) - 1);
  ASSERT_TRUE(ParseOption("rank", "007", &opts).ok());
  EXPECT_EQ(opts.rank, 7);
  ASSERT_TRUE(ParseOption("timeout_ms", "9223372036854775807", &opts).ok());
  EXPECT_EQ(opts.timeout_ms, 9223372036854775807LL);
}

TEST(ConfigTest, TransportsParsing) {
  Options opts;
  // A plugin's transport parses like a built-in one; init says whether it
  // exists.
  ASSERT_TRUE(ParseOption("transports", "uds,tcp", &opts).ok());
  EXPECT_THAT(opts.transports, ElementsAre("uds", "tcp"));
  ASSERT_TRUE(ParseOption("transports", "shm, ibverbs ,tcp", &opts).ok());
  EXPECT_THAT(opts.transports, ElementsAre("shm", "ibverbs", "tcp"));
  ASSERT_TRUE(ParseOption("transports", "", &opts).ok());
  EXPECT_THAT(opts.transports, IsEmpty());
}

TEST(ConfigTest, JobTokenAcceptsAnythingIncludingEmpty) {
  Config cfg;
  ASSERT_TRUE(cfg.Set("job_token", "").ok());
  ASSERT_TRUE(cfg.Set("job_token", "a b:c,=").ok());
  EnvMap env = SingleRank();
  env["HCOMM_JOB_TOKEN"] = "from-env";
  absl::StatusOr<Options> o = cfg.Resolve(FakeEnv(env));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->job_token, "a b:c,=");
}

TEST(ConfigTest, RankNotBelowWorldSize) {
  Config cfg;
  ASSERT_TRUE(cfg.Set("world_size", "4").ok());
  absl::StatusOr<Options> o =
      cfg.Resolve(FakeEnv({{"RANK", "4"}, {"HCOMM_STORE_ADDR", "h:1"}}));
  ExpectInvalid(o.status(), {"rank 4 (env RANK)", "world_size 4 (config)"});
  o = cfg.Resolve(FakeEnv({{"RANK", "9"}, {"HCOMM_STORE_ADDR", "h:1"}}));
  ExpectInvalid(o.status(), {"rank 9 (env RANK)", "world_size 4 (config)"});
}

TEST(ConfigTest, MissingRankListsVariables) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv({{"WORLD_SIZE", "1"}, {"RANK", ""}}));
  ExpectInvalid(o.status(), {"rank is not set", "'rank'",
                             "HCOMM_RANK, RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID"});
}

TEST(ConfigTest, MissingWorldSizeListsVariables) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv({{"RANK", "0"}}));
  ExpectInvalid(o.status(),
                {"world_size is not set",
                 "HCOMM_WORLD_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS"});
  EXPECT_THAT(std::string(o.status().message()), ::testing::Not(HasSubstr("rank is not set")));
}

TEST(ConfigTest, MissingBothReportsBoth) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv({}));
  ExpectInvalid(o.status(), {"rank is not set", "world_size is not set"});
}

TEST(ConfigTest, StoreAddrRequiredWhenWorldSizeAboveOne) {
  absl::StatusOr<Options> o =
      Config().Resolve(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"HCOMM_STORE_ADDR", ""}}));
  ExpectInvalid(o.status(), {"store_addr is not set", "world_size is 2 (env WORLD_SIZE)",
                             "HCOMM_STORE_ADDR", "MASTER_ADDR and MASTER_PORT"});
}

TEST(ConfigTest, StoreAddrNotRequiredWhenWorldSizeIsOne) {
  absl::StatusOr<Options> o = Config().Resolve(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->store_addr, "");
  EXPECT_EQ(o->sources["store_addr"], "default");
}

TEST(ConfigTest, ParseOptionRejectsNullOptions) {
  ExpectInvalid(ParseOption("rank", "1", nullptr), {"NULL"});
}

TEST(ConfigTest, ProcessEnvReadsGetenv) {
  // Only asks for a variable nobody sets; the other tests never read the real
  // environment.
  EnvLookup env = ProcessEnv();
  EXPECT_FALSE(env("HCOMM_CONFIG_TEST_SURELY_UNSET_VARIABLE").has_value());
}

}  // namespace
}  // namespace hcomm
