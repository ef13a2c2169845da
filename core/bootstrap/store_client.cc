#include "core/bootstrap/store_client.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/bootstrap/handshake.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"
#include "core/bootstrap/store_server.h"

namespace hcomm {
namespace {

constexpr int64_t kMaxServerWaitMs = int64_t{30} * 24 * 3600 * 1000;

std::string Quote(absl::string_view key) {
  constexpr size_t kShown = 200;
  if (key.size() <= kShown) return absl::StrCat("'", absl::CHexEscape(key), "'");
  return absl::StrCat("'", absl::CHexEscape(key.substr(0, kShown)), "...' (", key.size(),
                      " bytes)");
}

std::string QuoteList(const std::vector<std::string>& keys) {
  constexpr size_t kListed = 20;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < keys.size() && i < kListed; ++i) quoted.push_back(Quote(keys[i]));
  std::string out = absl::StrJoin(quoted, ", ");
  if (keys.size() > kListed) absl::StrAppend(&out, " and ", keys.size() - kListed, " more");
  return out;
}

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return InvalidArgument("store keys must not be empty");
  if (key.size() > StoreServer::kMaxKeyBytes) {
    return InvalidArgument(absl::StrCat("store key ", Quote(key), " is longer than ",
                                        StoreServer::kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckKeys(const std::vector<std::string>& keys) {
  if (keys.size() > StoreServer::kMaxKeysPerRequest) {
    return InvalidArgument(absl::StrCat("a store request may name at most ",
                                        StoreServer::kMaxKeysPerRequest, " keys, got ",
                                        keys.size()));
  }
  for (const std::string& k : keys) HCOMM_RETURN_IF_ERROR(CheckKey(k));
  return absl::OkStatus();
}

// How long the server may wait: a little less than we will, so that its
// answer (which names what was missing) normally arrives before our own
// deadline fires.
uint64_t ServerTimeoutMs(MonoTime deadline) {
  const absl::Duration left = deadline - MonoNow();
  if (left <= absl::ZeroDuration()) return 0;
  const absl::Duration margin =
      std::clamp(left / 5, absl::Milliseconds(1), absl::Milliseconds(250));
  const int64_t ms = absl::ToInt64Milliseconds(left - margin);
  return static_cast<uint64_t>(std::clamp<int64_t>(ms, 0, kMaxServerWaitMs));
}

// Handshake failures other than a refused token mean the store is not
// usable: Unavailable, as for a failed connection.
absl::Status HandshakeError(const absl::Status& s, const net::HostPort& addr) {
  if (CodeOf(s) == ErrorCode::kPermissionDenied) {
    return Annotate(s, absl::StrCat("store at ", addr.ToString()));
  }
  return Unavailable(absl::StrCat("store at ", addr.ToString(),
                                  " unreachable: handshake failed: ", s.message()));
}

}  // namespace

bool DeadlineLock::LockUntil(MonoTime deadline) {
  absl::MutexLock l(&mu_);
  while (held_) {
    if (freed_.WaitUntil(&mu_, deadline) && held_) return false;
  }
  held_ = true;
  return true;
}

void DeadlineLock::Unlock() {
  absl::MutexLock l(&mu_);
  held_ = false;
  freed_.Signal();
}

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Connect(const net::HostPort& addr,
                                                                  std::string token,
                                                                  MonoTime deadline) {
  absl::StatusOr<net::Fd> fd = net::ConnectWithRetry(addr, deadline);
  if (!fd.ok()) {
    return Unavailable(absl::StrCat("store at ", addr.ToString(),
                                    " unreachable: ", fd.status().message()));
  }
  absl::Status hs = HandshakeAsClient(fd->get(), token, deadline);
  if (!hs.ok()) return HandshakeError(hs, addr);
  return std::unique_ptr<StoreClient>(new StoreClient(addr, std::move(token), *std::move(fd)));
}

StoreClient::StoreClient(net::HostPort addr, std::string token, net::Fd fd)
    : addr_(std::move(addr)), token_(std::move(token)), fd_(std::move(fd)) {}

StoreClient::~StoreClient() = default;

absl::StatusOr<store::Response> StoreClient::Call(store::Request* req, MonoTime deadline,
                                                  const std::string& what) {
  const MonoTime start = MonoNow();
  if (start >= deadline) {
    return Timeout(absl::StrCat(what, " at ", addr_.ToString(),
                                ": the deadline had passed before the call"));
  }
  if (!call_lock_.LockUntil(deadline)) {
    return Timeout(absl::StrCat(what, " at ", addr_.ToString(), " timed out after ",
                                absl::FormatDuration(MonoNow() - start),
                                " waiting for another request on this store client"));
  }
  absl::StatusOr<store::Response> resp = CallLocked(req, start, deadline, what);
  call_lock_.Unlock();
  return resp;
}

absl::StatusOr<store::Response> StoreClient::CallLocked(store::Request* req, MonoTime start,
                                                        MonoTime deadline,
                                                        const std::string& what) {
  if (!fd_.valid()) {
    // One attempt, no retries: the store was up before.
    absl::StatusOr<net::Fd> fd = net::Connect(addr_, deadline);
    absl::Status s = fd.status();
    if (s.ok()) s = HandshakeAsClient(fd->get(), token_, deadline);
    if (!s.ok()) {
      if (CodeOf(s) == ErrorCode::kPermissionDenied) {
        return Annotate(s, absl::StrCat(what, ": reconnecting to the store at ", addr_.ToString()));
      }
      if (CodeOf(s) == ErrorCode::kTimeout) {
        return Timeout(absl::StrCat(what, " at ", addr_.ToString(), " timed out after ",
                                    absl::FormatDuration(deadline - start),
                                    " reconnecting (the connection was lost: ", lost_reason_,
                                    "): ", s.message()));
      }
      return Unavailable(absl::StrCat(what, ": the connection to the store at ", addr_.ToString(),
                                      " was lost (", lost_reason_,
                                      ") and reconnecting failed: ", s.message()));
    }
    fd_ = *std::move(fd);
  }
  req->set_id(++next_id_);
  req->set_timeout_ms(ServerTimeoutMs(deadline));
  std::string bytes;
  if (!req->SerializeToString(&bytes)) return Internal(absl::StrCat(what, ": cannot serialise"));
  absl::Status w = net::WriteFrame(fd_.get(), bytes, deadline);
  if (!w.ok()) return ConnectionLost(w, start, deadline, what);
  bytes.clear();
  bytes.shrink_to_fit();
  absl::StatusOr<std::string> frame =
      net::ReadFrame(fd_.get(), StoreServer::kMaxFrameBytes, deadline);
  if (!frame.ok()) return ConnectionLost(frame.status(), start, deadline, what);
  store::Response resp;
  if (!resp.ParseFromString(*frame) || resp.id() != req->id()) {
    return ConnectionLost(PeerFailure("garbled response from the store"), start, deadline, what);
  }
  if (resp.code() != 0) {
    ErrorCode code = static_cast<ErrorCode>(resp.code());
    if (resp.code() < 0 || resp.code() > static_cast<int>(ErrorCode::kInternal)) {
      code = ErrorCode::kInternal;
    }
    return MakeError(code, absl::StrCat(what, " at ", addr_.ToString(), ": ", resp.message()));
  }
  return resp;
}

absl::Status StoreClient::ConnectionLost(const absl::Status& io, MonoTime start,
                                         MonoTime deadline, const std::string& what) {
  // After a partial exchange the stream position is unknown: drop it.
  fd_.reset();
  lost_reason_ = std::string(io.message());
  if (CodeOf(io) == ErrorCode::kTimeout) {
    return Timeout(absl::StrCat(what, " at ", addr_.ToString(), " timed out after ",
                                absl::FormatDuration(deadline - start), " (", io.message(), ")"));
  }
  return Unavailable(absl::StrCat(what, ": lost the connection to the store at ",
                                  addr_.ToString(), ": ", io.message()));
}

absl::Status StoreClient::Set(const std::string& key, const std::string& value,
                              MonoTime deadline) {
  HCOMM_RETURN_IF_ERROR(CheckKey(key));
  if (value.size() > StoreServer::kMaxValueBytes) {
    return InvalidArgument(absl::StrCat("store SET of key ", Quote(key), ": the value has ",
                                        value.size(), " bytes; the limit is ",
                                        StoreServer::kMaxValueBytes));
  }
  store::Request req;
  req.mutable_set()->set_key(key);
  req.mutable_set()->set_value(value);
  return Call(&req, deadline, absl::StrCat("store SET of key ", Quote(key))).status();
}

absl::StatusOr<std::string> StoreClient::Get(const std::string& key, MonoTime deadline) {
  HCOMM_RETURN_IF_ERROR(CheckKey(key));
  store::Request req;
  req.mutable_get()->set_key(key);
  HCOMM_ASSIGN_OR_RETURN(store::Response resp,
                         Call(&req, deadline, absl::StrCat("store GET of key ", Quote(key))));
  return std::move(*resp.mutable_value());
}

absl::StatusOr<int64_t> StoreClient::Add(const std::string& key, int64_t delta,
                                         MonoTime deadline) {
  HCOMM_RETURN_IF_ERROR(CheckKey(key));
  store::Request req;
  req.mutable_add()->set_key(key);
  req.mutable_add()->set_delta(delta);
  HCOMM_ASSIGN_OR_RETURN(store::Response resp,
                         Call(&req, deadline, absl::StrCat("store ADD to key ", Quote(key))));
  return resp.counter();
}

absl::Status StoreClient::Wait(const std::vector<std::string>& keys, MonoTime deadline) {
  HCOMM_RETURN_IF_ERROR(CheckKeys(keys));
  if (keys.empty()) return absl::OkStatus();
  store::Request req;
  for (const std::string& k : keys) req.mutable_wait()->add_keys(k);
  return Call(&req, deadline, absl::StrCat("store WAIT for keys ", QuoteList(keys))).status();
}

absl::StatusOr<std::vector<bool>> StoreClient::Check(const std::vector<std::string>& keys,
                                                     MonoTime deadline) {
  HCOMM_RETURN_IF_ERROR(CheckKeys(keys));
  if (keys.empty()) return std::vector<bool>();
  store::Request req;
  for (const std::string& k : keys) req.mutable_check()->add_keys(k);
  HCOMM_ASSIGN_OR_RETURN(store::Response resp,
                         Call(&req, deadline, absl::StrCat("store CHECK of ", keys.size(), " keys")));
  if (static_cast<size_t>(resp.exists_size()) != keys.size()) {
    return Internal(absl::StrCat("store CHECK of ", keys.size(), " keys at ", addr_.ToString(),
                                 ": the store answered for ", resp.exists_size()));
  }
  return std::vector<bool>(resp.exists().begin(), resp.exists().end());
}

}  // namespace hcomm
