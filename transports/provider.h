// How the library drives a transport of the registry (built in or a
// plugin), always through its C table (c_api/include/hcomm/hcomm_transport.h):
// the setup that decides how a peer is reached (Provider: what a rank
// publishes, can-reach, connect), and the moving of bytes once connected
// (the Transport that Provider::transport() returns, transport.h).
//
//   HCOMM_ASSIGN_OR_RETURN(auto p, Provider::Open(table, job, &setup, &sink));
//   auto card = p->Publish();                       // NoDevice: unusable here
//   ... exchange cards through the store ...
//   if (p->CanReach(peer, their_host, their_card)) mine.push_back(peer);
//   HCOMM_RETURN_IF_ERROR(p->Connect(mine));        // every side of each pair
//   p->transport()->Send(peer, meta, buf, len, done);
//
// Errors a transport reports (host->set_error) come back as statuses that
// name the transport and say why.
//
// THREAD SAFETY: Open, Publish, CanReach and Connect are setup calls, from
// one thread. The Transport may then be used from any thread; the Provider
// must outlive it and is destroyed (the table's close) only once nothing
// uses it.
#ifndef HCOMM_TRANSPORTS_PROVIDER_H_
#define HCOMM_TRANSPORTS_PROVIDER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "hcomm/hcomm_transport.h"
#include "core/base/clock.h"
#include "transports/transport.h"

namespace hcomm {

// The job as every transport of it sees it.
struct ProviderJob {
  int rank = 0;
  int world_size = 1;
  std::string job_key;   // unique among this host's jobs
  std::string host_id;   // this rank's host identity
  std::string advertise_address;  // an address of this host that the others route to
};

// The setup services the engine lends the transports (the store, the
// job's token, the init's deadline), keyed by transport so that two
// transports never read each other's values.
class ProviderSetup {
 public:
  virtual ~ProviderSetup() = default;
  virtual absl::Status Put(const std::string& transport, const std::string& key,
                           const std::string& value) = 0;
  // Waits (by the init's deadline) for what rank `peer` put under `key`.
  virtual absl::StatusOr<std::string> Get(const std::string& transport, int peer,
                                          const std::string& key) = 0;
  // OK while init may go on; else why not (another rank's init failed, the
  // deadline passed, Ctrl-C).
  virtual absl::Status Check() = 0;
  virtual MonoTime Deadline() const = 0;
  // The job-token handshake on a connected stream socket.
  virtual absl::Status Authenticate(int fd, bool as_server) = 0;
};

class Provider {
 public:
  // Checks `table` (version, size, required functions) without opening it:
  // the reason it cannot be used, or OK.
  static absl::Status Validate(const hcomm_transport_v1_t* table);

  // Opens the transport for this job. `setup` and `sink` must outlive the
  // Provider (the sink gets every frame that arrives).
  static absl::StatusOr<std::unique_ptr<Provider>> Open(const hcomm_transport_v1_t* table,
                                                        const ProviderJob& job,
                                                        ProviderSetup* setup, FrameSink* sink);
  ~Provider();
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  const char* name() const { return table_->name; }

  // This rank's card for the others. NoDevice (naming the transport and
  // why) where it cannot be used on this rank.
  absl::StatusOr<std::string> Publish();
  bool CanReach(int peer, const std::string& peer_host, const std::string& peer_card);
  // More ranks on this host than CPUs they may use (tells the transport
  // before Connect).
  void SetCpusShared(bool shared) { host_.cpus_shared = shared ? 1 : 0; }
  absl::Status Connect(const std::vector<int>& peers);

  // Moves bytes through the table; valid after Connect, for the Provider's
  // lifetime.
  Transport* transport() { return transport_.get(); }

 private:
  class TableTransport;
  struct Host;

  Provider(const hcomm_transport_v1_t* table, ProviderSetup* setup, FrameSink* sink);
  // Why the last call failed, from set_error, as a status of `code`
  // annotated with what was being done.
  absl::Status Failed(hcomm_status_t code, const std::string& doing);

  // hcomm_transport_host_t's functions; ctx is the Provider.
  static void SetError(void* ctx, const char* message);
  static hcomm_status_t PutThunk(void* ctx, const char* key, const void* value, size_t len);
  static hcomm_status_t GetThunk(void* ctx, int peer, const char* key, void* buf, size_t cap,
                                 size_t* len);
  static int64_t TimeLeftMs(void* ctx);
  static hcomm_status_t CheckThunk(void* ctx);
  static hcomm_status_t AuthenticateThunk(void* ctx, int fd, int as_server);
  static void* OnFrame(void* ctx, int peer, const void* header, uint64_t payload_len);
  static void OnPayload(void* ctx, int peer, const void* header, uint64_t payload_len);
  static void OnWholeFrame(void* ctx, int peer, const void* header, const void* payload,
                           uint64_t payload_len);
  static void OnConnectionLost(void* ctx, int peer, const char* why);

  const hcomm_transport_v1_t* const table_;
  ProviderSetup* const setup_;
  FrameSink* const sink_;
  ProviderJob job_;
  hcomm_transport_host_t host_;
  void* state_ = nullptr;
  // Setup calls' reason for failing (set_error), read after the call.
  absl::Mutex error_mu_;
  std::string error_ ABSL_GUARDED_BY(error_mu_);
  std::unique_ptr<Transport> transport_;  // a TableTransport
};

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_PROVIDER_H_
