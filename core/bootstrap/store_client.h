// Client of the rendezvous store (core/bootstrap/store_server.h).
//
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<StoreClient> store,
//                          StoreClient::Connect(addr, token, deadline));
//   HCOMM_RETURN_IF_ERROR(store->Set("addr/3", my_address, deadline));
//   HCOMM_ASSIGN_OR_RETURN(std::string peer, store->Get("addr/0", deadline));
//   HCOMM_ASSIGN_OR_RETURN(int64_t arrived, store->Add("arrivals", 1, deadline));
//
// Every call returns by its deadline, even when the server is silent: the
// server is asked to give up a little before the deadline (so that its
// answer, which names the missing keys, arrives in time), and the client
// stops reading at the deadline itself. A connection left in an unknown state
// (a timeout mid-response, a broken socket) is dropped and the next call
// reconnects once, without retrying refused connections.
//
// Errors common to all calls: Timeout at the deadline; Unavailable when the
// connection to the store is lost; PermissionDenied when a reconnection is
// refused; InvalidArgument for keys that are empty or longer than
// StoreServer::kMaxKeyBytes, or values longer than StoreServer::kMaxValueBytes.
//
// THREAD SAFETY: thread-safe. Requests from several threads are served one
// at a time over one connection; a call waiting for its turn still ends by
// its own deadline.
#ifndef HCOMM_CORE_BOOTSTRAP_STORE_CLIENT_H_
#define HCOMM_CORE_BOOTSTRAP_STORE_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/net.h"

namespace hcomm {

namespace store {
class Request;
class Response;
}  // namespace store

// A lock whose acquisition takes a deadline (absl::Mutex acquisition does
// not), held across a whole request/response exchange.
class ABSL_LOCKABLE DeadlineLock {
 public:
  // True when acquired; false when the deadline passed first.
  bool LockUntil(MonoTime deadline) ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true);
  void Unlock() ABSL_UNLOCK_FUNCTION();

 private:
  absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  CondVar freed_;  // signalled when held_ goes false
};

class StoreClient {
 public:
  // Connects to the store at `addr` (retrying refused connections until the
  // deadline: rank 0 may not be up yet) and runs the job-token handshake.
  // Errors: Unavailable("store at host:port unreachable: ...") when no
  // connection and handshake completes by the deadline; PermissionDenied
  // ("... refused our job token") when the store rejects `token`, or when the
  // store cannot prove it knows the token.
  static absl::StatusOr<std::unique_ptr<StoreClient>> Connect(const net::HostPort& addr,
                                                              std::string token,
                                                              MonoTime deadline);

  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;
  ~StoreClient();

  // Stores `value` under `key`, replacing any previous value.
  absl::Status Set(const std::string& key, const std::string& value, MonoTime deadline);

  // Waits until `key` exists and returns its value. Timeout names the key.
  absl::StatusOr<std::string> Get(const std::string& key, MonoTime deadline);

  // Adds `delta` to the decimal int64 counter at `key` (created at 0) and
  // returns the new value; Get(key) returns it as a decimal string.
  // InvalidArgument when the value is not a decimal int64 or would overflow.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta, MonoTime deadline);

  // Waits until every key exists. Timeout lists the keys still missing.
  absl::Status Wait(const std::vector<std::string>& keys, MonoTime deadline);

  // Whether each key exists now, in order. Does not wait for keys.
  absl::StatusOr<std::vector<bool>> Check(const std::vector<std::string>& keys,
                                          MonoTime deadline);

  const net::HostPort& addr() const { return addr_; }

 private:
  StoreClient(net::HostPort addr, std::string token, net::Fd fd);

  // Sends `req` (setting its id and the server's timeout) and reads the
  // response. Any error code in the response becomes the returned status,
  // prefixed with `what`.
  absl::StatusOr<store::Response> Call(store::Request* req, MonoTime deadline,
                                       const std::string& what);
  absl::StatusOr<store::Response> CallLocked(store::Request* req, MonoTime start,
                                             MonoTime deadline, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_lock_);
  // Drops the connection after an I/O error and turns the error into the
  // call's status.
  absl::Status ConnectionLost(const absl::Status& io, MonoTime start, MonoTime deadline,
                              const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_lock_);

  const net::HostPort addr_;
  const std::string token_;
  DeadlineLock call_lock_;  // one request/response exchange at a time
  net::Fd fd_ ABSL_GUARDED_BY(call_lock_);  // invalid after an I/O error
  std::string lost_reason_ ABSL_GUARDED_BY(call_lock_);  // why fd_ was dropped
  uint64_t next_id_ ABSL_GUARDED_BY(call_lock_) = 0;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_BOOTSTRAP_STORE_CLIENT_H_
