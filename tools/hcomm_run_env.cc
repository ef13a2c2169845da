#include "tools/hcomm_run_env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace hcomm_run {
namespace {

constexpr size_t kTokenBytes = 32;
constexpr size_t kJobKeyBytes = 8;  // 16 hex digits, as the library expects

std::string Hex(const unsigned char* bytes, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (size_t i = 0; i < n; ++i) {
    hex += kHex[bytes[i] >> 4];
    hex += kHex[bytes[i] & 0xf];
  }
  return hex;
}

// `nbytes` bytes from getrandom(), as 2 * nbytes lowercase hex digits.
std::optional<std::string> RandomHex(size_t nbytes) {
  std::vector<unsigned char> bytes(nbytes);
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    got += static_cast<size_t>(n);
  }
  return Hex(bytes.data(), bytes.size());
}

// Binds 127.0.0.1:0, reads the port the kernel chose, closes the socket.
std::optional<int> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  std::optional<int> port;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// The multi-node key (see MakeJobIdentity in the header).
std::optional<std::string> DerivedJobKey(const std::string& token, int port) {
  const std::string label = "hcomm_run job key " + std::to_string(port);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(label.data()), label.size(), mac,
           &mac_len) == nullptr ||
      mac_len < kJobKeyBytes) {
    return std::nullopt;
  }
  return Hex(mac, kJobKeyBytes);
}

}  // namespace

std::optional<JobIdentity> MakeJobIdentity(const Options& opts, std::string* error) {
  JobIdentity id;
  id.port = opts.port;
  if (id.port == 0) {
    std::optional<int> p = PickFreePort();
    if (!p) {
      *error = std::string("cannot find a free port on 127.0.0.1: ") + strerror(errno);
      return std::nullopt;
    }
    id.port = *p;
  }
  const char* inherited = getenv("HCOMM_JOB_TOKEN");
  if (inherited != nullptr && *inherited != '\0') {
    id.token = inherited;
  } else {
    std::optional<std::string> t = RandomHex(kTokenBytes);
    if (!t) {
      *error = std::string("getrandom failed: ") + strerror(errno);
      return std::nullopt;
    }
    id.token = *t;
  }
  std::optional<std::string> key =
      opts.nnodes > 1 ? DerivedJobKey(id.token, id.port) : RandomHex(kJobKeyBytes);
  if (!key) {
    *error = opts.nnodes > 1 ? "cannot derive the job key: HMAC-SHA256 failed"
                             : std::string("getrandom failed: ") + strerror(errno);
    return std::nullopt;
  }
  id.job_key = *key;
  return id;
}

std::vector<std::string> BaseEnvironment(char** env) {
  static const char* const kDropped[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
      "MASTER_ADDR", "MASTER_PORT", "HCOMM_JOB_TOKEN", "HCOMM_JOB_KEY",
      // The library prefers these over RANK, WORLD_SIZE, MASTER_ADDR:MASTER_PORT.
      "HCOMM_RANK", "HCOMM_WORLD_SIZE", "HCOMM_STORE_ADDR"};
  std::vector<std::string> base;
  bool have_omp = false;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    std::string key = entry.substr(0, entry.find('='));
    have_omp = have_omp || key == "OMP_NUM_THREADS";
    bool drop = std::any_of(std::begin(kDropped), std::end(kDropped),
                            [&](const char* k) { return key == k; });
    if (!drop) base.push_back(std::move(entry));
  }
  if (!have_omp) base.push_back("OMP_NUM_THREADS=1");
  return base;
}

std::vector<std::string> RankEnvironment(const std::vector<std::string>& base, const Options& opts,
                                         const JobIdentity& id, int local) {
  std::vector<std::string> env = base;
  env.push_back("RANK=" + std::to_string(opts.GlobalRank(local)));
  env.push_back("WORLD_SIZE=" + std::to_string(opts.WorldSize()));
  env.push_back("LOCAL_RANK=" + std::to_string(local));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(opts.nranks));
  env.push_back("GROUP_RANK=" + std::to_string(opts.node_rank));
  env.push_back("NODE_RANK=" + std::to_string(opts.node_rank));
  env.push_back("MASTER_ADDR=" + opts.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(id.port));
  env.push_back("HCOMM_JOB_TOKEN=" + id.token);
  env.push_back("HCOMM_JOB_KEY=" + id.job_key);
  return env;
}

}  // namespace hcomm_run
