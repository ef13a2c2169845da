// libFuzzer target: configuration parsing (core/base/config.h, net::ParseHostPort).
//
// The input is a small script, one command per line, so that the seed corpus
// is readable and mutations stay meaningful:
//   set KEY=VALUE      Config::Set on the configuration under test
//   parse KEY=VALUE    ParseOption into a scratch Options
//   env NAME=VALUE     an environment variable seen by the next resolve
//   hostport VALUE     net::ParseHostPort
//   resolve            Config::Resolve with the environment built so far
// Values may hold any byte except '\n'. Unknown commands are ignored.
//
// Checked on every input (a violation aborts, which libFuzzer reports):
// - a failed Set or ParseOption changes nothing (documented in config.h);
// - every failure is InvalidArgument with a message;
// - a successful Resolve yields Options within the documented ranges
//   (0 <= rank < world_size <= kMaxWorldSize, timeout_ms > 0, a store_addr
//   that parses when world_size > 1, transport names of [a-z0-9_]{1,31}
//   without duplicates, plugin paths none of them empty, a known algo, a
//   non-empty host_id, a source for every key).
//
// Build and run: tools/fuzz.sh config SECONDS.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "core/base/config.h"
#include "core/base/net.h"
#include "core/base/status.h"

namespace {

void Check(bool ok, const char* what, absl::string_view detail = "") {
  if (ok) return;
  fprintf(stderr, "config_fuzzer: invariant violated: %s [%.*s]\n", what,
          static_cast<int>(detail.size()), detail.data());
  abort();
}

void CheckFailure(const absl::Status& s, const char* what) {
  Check(hcomm::CodeOf(s) == hcomm::ErrorCode::kInvalidArgument, what, s.ToString());
  Check(!s.message().empty(), "error without a message", what);
}

bool SameOptions(const hcomm::Options& a, const hcomm::Options& b) {
  return a.rank == b.rank && a.world_size == b.world_size && a.store_addr == b.store_addr &&
         a.job_token == b.job_token && a.timeout_ms == b.timeout_ms &&
         a.transports == b.transports && a.algo == b.algo && a.host_id == b.host_id &&
         a.plugins == b.plugins && a.sources == b.sources;
}

bool SameResult(const absl::StatusOr<hcomm::Options>& a, const absl::StatusOr<hcomm::Options>& b) {
  if (a.ok() != b.ok()) return false;
  if (!a.ok()) return a.status() == b.status();
  return SameOptions(*a, *b);
}

void CheckResolved(const hcomm::Options& o) {
  Check(o.world_size >= 1 && o.world_size <= hcomm::kMaxWorldSize, "world_size out of range");
  Check(o.rank >= 0 && o.rank < o.world_size, "rank out of range");
  Check(o.timeout_ms > 0, "timeout_ms not positive");
  if (o.world_size > 1) {
    Check(!o.store_addr.empty(), "world_size > 1 without store_addr");
  }
  if (!o.store_addr.empty()) {
    auto hp = hcomm::net::ParseHostPort(o.store_addr);
    Check(hp.ok(), "resolved store_addr does not parse", o.store_addr);
    Check(!hp->host.empty(), "resolved store_addr has an empty host", o.store_addr);
  }
  std::set<std::string> seen;
  for (const std::string& t : o.transports) {
    Check(!t.empty() && t.size() <= 31 &&
              t.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos,
          "a transport name outside [a-z0-9_]{1,31} accepted", t);
    Check(seen.insert(t).second, "duplicate transport accepted", t);
  }
  for (const std::string& p : o.plugins) Check(!p.empty(), "an empty plugin path accepted");
  Check(o.algo == "auto" || o.algo == "ring" || o.algo == "tree" || o.algo == "direct",
        "unknown algo accepted", o.algo);
  Check(!o.host_id.empty(), "empty host_id");
  for (const std::string& k : hcomm::Config::Keys()) {
    Check(o.sources.count(k) == 1, "a key without a source", k);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  hcomm::Config cfg;
  std::map<std::string, std::string> env;
  auto lookup = [&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };

  while (!input.empty()) {
    size_t nl = input.find('\n');
    absl::string_view line = input.substr(0, nl);
    input = nl == absl::string_view::npos ? absl::string_view() : input.substr(nl + 1);
    size_t sp = line.find(' ');
    absl::string_view cmd = line.substr(0, sp);
    absl::string_view arg =
        sp == absl::string_view::npos ? absl::string_view() : line.substr(sp + 1);
    size_t eq = arg.find('=');
    absl::string_view key = arg.substr(0, eq);
    absl::string_view value =
        eq == absl::string_view::npos ? absl::string_view() : arg.substr(eq + 1);

    if (cmd == "set") {
      hcomm::Config before = cfg;
      absl::Status s = cfg.Set(key, value);
      if (!s.ok()) {
        CheckFailure(s, "Config::Set");
        Check(SameResult(before.Resolve(lookup), cfg.Resolve(lookup)),
              "a failed Config::Set changed the configuration", s.message());
      }
    } else if (cmd == "parse") {
      hcomm::Options opts;
      opts.rank = 3;
      opts.store_addr = "keep:1";
      const hcomm::Options before = opts;
      absl::Status s = hcomm::ParseOption(key, value, &opts);
      if (!s.ok()) {
        CheckFailure(s, "ParseOption");
        Check(SameOptions(before, opts), "a failed ParseOption changed *opts", s.message());
      }
    } else if (cmd == "env") {
      env[std::string(key)] = std::string(value);
    } else if (cmd == "hostport") {
      auto hp = hcomm::net::ParseHostPort(arg, "fuzz");
      if (hp.ok()) {
        Check(hp->port >= 0 && hp->port <= 65535, "port out of range");
      } else {
        CheckFailure(hp.status(), "ParseHostPort");
      }
    } else if (cmd == "resolve") {
      absl::StatusOr<hcomm::Options> o = cfg.Resolve(lookup);
      if (o.ok()) {
        CheckResolved(*o);
      } else {
        CheckFailure(o.status(), "Config::Resolve");
      }
    }
  }
  // Always end with a resolve, so that every input exercises it.
  absl::StatusOr<hcomm::Options> o = cfg.Resolve(lookup);
  if (o.ok()) {
    CheckResolved(*o);
  } else {
    CheckFailure(o.status(), "Config::Resolve");
  }
  return 0;
}
