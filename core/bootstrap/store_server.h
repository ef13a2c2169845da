// The rendezvous store: a small TCP key-value store that rank 0 of a job
// serves, and through which ranks exchange addresses during init.
//
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<StoreServer> server,
//                          StoreServer::Start("0.0.0.0", 29500, token));
//   ... clients (core/bootstrap/store_client.h) connect to host:server->port() ...
//   server.reset();  // stops serving; waiting clients get an error
//
// Every connection first runs HandshakeAsServer (core/bootstrap/handshake.h)
// with a short deadline (StoreLimits::handshake_timeout); strangers, wrong
// tokens and junk are dropped without disturbing other connections.
// Authenticated clients then send Request frames and get one Response frame
// each (core/bootstrap/store.proto):
//   SET(key, value)   stores value under key
//   GET(key)          waits (up to the client's timeout) until key exists
//   ADD(key, delta)   adds to a decimal int64 counter (created at 0)
//   WAIT(keys)        waits until all keys exist
//   CHECK(keys)       which keys exist now
// Limits: keys of 1..4 KiB, values up to 64 MiB, 65536 keys per WAIT/CHECK,
// StoreLimits::max_stored_bytes in all (a SET or ADD past it gets OutOfMem).
// The frame length is checked before anything is allocated, and a frame's
// buffer grows only as its bytes arrive (at most twice what arrived, plus
// 64 KiB), so a header that promises 64 MiB and sends nothing costs little.
//
// Design: one accept thread plus one thread per connection: at most
// StoreLimits::max_connections authenticated ones and
// StoreLimits::max_unauthenticated still in the handshake (a newcomer past
// that drops the oldest of those). A connection thread that meets an
// exception (std::bad_alloc) drops its connection, says why on stderr, and
// the server keeps serving. A blocked GET or WAIT parks its own connection
// thread on a condition variable registered for the keys it waits for, so
// it never holds up other clients. docs/reliability.md, "The store under
// abuse", explains the limits.
//
// THREAD SAFETY: all methods are thread-safe.
#ifndef HCOMM_CORE_BOOTSTRAP_STORE_SERVER_H_
#define HCOMM_CORE_BOOTSTRAP_STORE_SERVER_H_

#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/base/clock.h"
#include "core/base/net.h"

namespace hcomm {

namespace store {
class Request;
class Response;
}  // namespace store

// What one store server lets its clients use up. The defaults suit any job;
// tests shrink them.
struct StoreLimits {
  // Authenticated connections served at once (one thread each).
  size_t max_connections = 4096;
  // Connections still in the job-token handshake. When a new connection
  // finds this many, the oldest of them is dropped: a flood of idle
  // strangers only churns among itself, while a real rank, whose handshake
  // takes a round trip or two, gets through.
  size_t max_unauthenticated = 64;
  // How long a connection may take to finish the handshake.
  absl::Duration handshake_timeout = absl::Seconds(3);
  // Total bytes stored, counted as key + value + kEntryOverheadBytes per
  // key. A SET or ADD that would pass it is refused with OutOfMem.
  size_t max_stored_bytes = size_t{1} << 30;
};

class StoreServer {
 public:
  static constexpr size_t kMaxKeyBytes = 4096;
  static constexpr size_t kMaxValueBytes = size_t{64} << 20;
  static constexpr size_t kMaxKeysPerRequest = 65536;
  // The largest request or response frame: a maximal value plus a key and
  // protobuf overhead.
  static constexpr size_t kMaxFrameBytes = kMaxValueBytes + 64 * 1024;
  // What each stored key costs beyond its key and value bytes, for
  // StoreLimits::max_stored_bytes (roughly the hash map's entry).
  static constexpr size_t kEntryOverheadBytes = 64;

  // Listens on host:port (port 0 = any free port; "0.0.0.0" = every IPv4
  // interface) and serves in background threads until destroyed.
  // Errors: Unavailable when it cannot listen; Internal when a thread or
  // eventfd cannot be created.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const std::string& host, int port,
                                                            std::string token);
  // The same with limits other than the defaults (tests).
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const std::string& host, int port,
                                                            std::string token,
                                                            const StoreLimits& limits);

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Stops serving: closes every connection (clients waiting in GET/WAIT get
  // an error at once), joins every thread, closes the listening socket.
  // Returns within about a second whatever the clients do.
  ~StoreServer();

  // The port actually bound.
  int port() const { return port_; }

  // Blocks until at least `n` GET/WAIT requests are waiting for keys, or the
  // deadline passes (Timeout). For tests and monitoring.
  absl::Status AwaitWaiters(int n, MonoTime deadline);

  // Bytes reserved right now for request frames still being received, over
  // all connections. For tests and monitoring.
  size_t PendingFrameBytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until PendingFrameBytes() >= n or the deadline passes (Timeout).
  absl::Status AwaitPendingFrameBytes(size_t n, MonoTime deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // For tests: when set, called with the new size before a connection
  // grows the buffer of a frame it is receiving; it may throw
  // std::bad_alloc to act as a failed allocation. Process-wide; nullptr
  // clears it.
  using AllocationHook = void (*)(size_t bytes);
  static void SetAllocationHookForTest(AllocationHook hook);

 private:
  // fuzz/store_request_fuzzer.cc feeds arbitrary bytes to ServeRequests, the
  // loop every connection runs once its handshake has succeeded.
  friend class StoreServerFuzzPeer;

  // Takes mu_ every millisecond to ask `reached` until it says yes (true)
  // or `deadline` passes (false): the tests' waits for a state of the server.
  bool PollUntil(absl::FunctionRef<bool()> reached, MonoTime deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // A parked GET/WAIT; its condition variable is signalled when one of its
  // keys is set, and on shutdown. Lives on the waiting thread's stack and is
  // registered in waiters_ / waiters_by_key_ only while it waits.
  struct Waiter {
    CondVar cv;
  };
  struct Conn {
    int fd = -1;  // -1 once the connection thread has closed it
    bool done = false;
    bool authenticated = false;  // counted in authenticated_
    pthread_t thread{};
  };

  StoreServer(net::Fd listen_fd, net::Fd wake_fd, int port, std::string token);
  StoreServer(net::Fd listen_fd, net::Fd wake_fd, int port, std::string token,
              const StoreLimits& limits);

  void AcceptLoop();
  void Admit(int fd);
  void ReapFinished();
  void Wake();
  void ServeConnection(uint64_t id, int fd);
  // The handshake, then ServeRequests; may throw (std::bad_alloc).
  void AuthenticateAndServe(uint64_t id, int fd);
  // Reads one length-prefixed request frame, growing its buffer as bytes
  // arrive and counting it in pending_frame_bytes_.
  absl::StatusOr<std::string> ReadRequestFrame(int fd, MonoTime deadline);
  void ServeRequests(int fd);
  // Fills *resp. Returns false when the connection must be dropped (the
  // client left while we waited).
  bool Handle(int fd, const store::Request& req, store::Response* resp);
  // Waits until every key exists. *missing gets the absent keys on failure.
  // Errors: Timeout, Unavailable (shutting down), PeerFailure (client left).
  absl::Status AwaitKeys(int fd, absl::Span<const std::string> keys, MonoTime deadline,
                         std::vector<std::string>* missing);
  static size_t EntryCost(const std::string& key, size_t value_bytes) {
    return key.size() + value_bytes + kEntryOverheadBytes;
  }
  // OutOfMem when storing value_bytes under key (whose current entry costs
  // old_cost, 0 if absent) would pass limits_.max_stored_bytes.
  absl::Status CheckRoomLocked(absl::string_view op, const std::string& key, size_t value_bytes,
                               size_t old_cost) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StoreLocked(const std::string& key, const std::string& value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> MissingLocked(absl::Span<const std::string> keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyKeyLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Stopping() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string token_;
  const StoreLimits limits_;
  const int port_;
  const net::Fd listen_fd_;  // read only by the accept thread
  const net::Fd wake_fd_;    // eventfd: wakes the accept thread
  pthread_t accept_thread_{};
  bool accept_started_ = false;  // set once by Start

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  // Connection threads by id. A connection thread closes its fd under mu_,
  // so the destructor never shuts down a recycled descriptor.
  absl::flat_hash_map<uint64_t, Conn> conns_ ABSL_GUARDED_BY(mu_);
  uint64_t next_conn_id_ ABSL_GUARDED_BY(mu_) = 0;
  // Connections still in the handshake, oldest (lowest id) first.
  std::set<uint64_t> unauthenticated_ ABSL_GUARDED_BY(mu_);
  size_t authenticated_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_frame_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Sum of key + value + kEntryOverheadBytes over data_.
  size_t stored_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<Waiter*>> waiters_by_key_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace hcomm

#endif  // HCOMM_CORE_BOOTSTRAP_STORE_SERVER_H_
