#include "transports/provider.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/status.h"

namespace hcomm {

namespace {

absl::Status FromC(hcomm_status_t code, absl::string_view why) {
  return MakeError(static_cast<ErrorCode>(code), why);
}

hcomm_status_t ToC(const absl::Status& s) { return static_cast<hcomm_status_t>(CodeOf(s)); }

// The required functions of a version 1 table, by name, for Validate.
struct Required {
  const char* name;
  bool (*present)(const hcomm_transport_v1_t&);
};
#define HCOMM_REQUIRED(f) {#f, [](const hcomm_transport_v1_t& t) { return t.f != nullptr; }}
constexpr Required kRequired[] = {
    HCOMM_REQUIRED(open),         HCOMM_REQUIRED(publish),     HCOMM_REQUIRED(can_reach),
    HCOMM_REQUIRED(connect),      HCOMM_REQUIRED(close),       HCOMM_REQUIRED(send),
    HCOMM_REQUIRED(cancel),       HCOMM_REQUIRED(poll),        HCOMM_REQUIRED(pending_sends),
    HCOMM_REQUIRED(close_write),  HCOMM_REQUIRED(shutdown_all), HCOMM_REQUIRED(fail_peer),
};
#undef HCOMM_REQUIRED

// A version 1 table ends with its optional functions; one that stops
// after the required ones is complete.
constexpr size_t kRequiredBytes = offsetof(hcomm_transport_v1_t, eager_bytes);

// An optional function of table `t`: NULL where the table is too short to
// have it.
#define HCOMM_OPTIONAL(t, f)                                                        \
  ((t)->struct_size >= offsetof(hcomm_transport_v1_t, f) + sizeof(hcomm_transport_v1_t::f) \
       ? (t)->f                                                                     \
       : nullptr)

}  // namespace

// The Transport interface over the table: what the engine calls.
class Provider::TableTransport final : public Transport {
 public:
  TableTransport(const hcomm_transport_v1_t* t, void* state, const char* name)
      : name_(name),
        state_(state),
        send_(t->send),
        cancel_(t->cancel),
        poll_(t->poll),
        pending_sends_(t->pending_sends),
        close_write_(t->close_write),
        shutdown_all_(t->shutdown_all),
        fail_peer_(t->fail_peer),
        eager_bytes_(HCOMM_OPTIONAL(t, eager_bytes)),
        try_send_now_(HCOMM_OPTIONAL(t, try_send_now)),
        take_whole_(HCOMM_OPTIONAL(t, take_whole)),
        poll_peer_(HCOMM_OPTIONAL(t, poll_peer)),
        poll_quiet_(HCOMM_OPTIONAL(t, poll_quiet)),
        spins_before_sleep_(HCOMM_OPTIONAL(t, spins_before_sleep)),
        open_wake_fd_(HCOMM_OPTIONAL(t, open_wake_fd)),
        arm_wake_(HCOMM_OPTIONAL(t, arm_wake)),
        disarm_wake_(HCOMM_OPTIONAL(t, disarm_wake)),
        watch_fd_(HCOMM_OPTIONAL(t, watch_fd)) {}

  const char* name() const override { return name_; }

  // A frame's callback, from send until it has run or cancel took the
  // frame back; its address is the handle the engine keeps for Cancel
  // (frames without a callback get handle 0 and are never cancelled). The
  // callback may run before send returns: whichever of the two ends last
  // frees it.
  struct Pending {
    static constexpr uint32_t kReturned = 1, kDone = 2;
    SendCallback done;
    uint64_t handle = 0;  // the transport's, set once send has returned
    std::atomic<uint32_t> ended{0};
  };
  static void Done(void* arg, hcomm_status_t code, const char* why) {
    Pending* p = static_cast<Pending*>(arg);
    SendCallback done = std::move(p->done);
    done(code == HCOMM_SUCCESS ? absl::OkStatus()
                               : FromC(code, why != nullptr ? why : "the frame could not leave"));
    if (p->ended.fetch_or(Pending::kDone, std::memory_order_acq_rel) & Pending::kReturned) {
      delete p;
    }
  }

  FrameHandle Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                   SendCallback done) override {
    uint64_t handle = 0;
    if (!done) {
      send_(state_, peer, meta.bytes, payload, len, nullptr, nullptr, &handle);
      return 0;
    }
    Pending* p = new Pending;
    p->done = std::move(done);
    hcomm_status_t s = send_(state_, peer, meta.bytes, payload, len, &Done, p, &handle);
    if (s != HCOMM_SUCCESS) {
      // Refused at once, so done will not run: report it as done would.
      SendCallback d = std::move(p->done);
      delete p;
      d(FromC(s, absl::StrCat(name_, ": send to rank ", peer, " refused")));
      return 0;
    }
    p->handle = handle;
    if (p->ended.fetch_or(Pending::kReturned, std::memory_order_acq_rel) & Pending::kDone) {
      delete p;  // done ran already: nothing is left to cancel
      return 0;
    }
    // Alive until done has run, and the engine cancels only a frame whose
    // callback has not (it checks under its lock, which the callback
    // takes).
    return reinterpret_cast<FrameHandle>(p);
  }

  bool TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) override {
    return try_send_now_ != nullptr && try_send_now_(state_, peer, meta.bytes, payload, len) != 0;
  }

  int TakeWhole(int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                void* take_arg) override {
    return take_whole_ != nullptr ? take_whole_(state_, peer, max_payload, take, take_arg) : -1;
  }

  bool Cancel(int peer, FrameHandle handle) override {
    if (handle == 0) return false;
    Pending* p = reinterpret_cast<Pending*>(handle);
    if (cancel_(state_, peer, p->handle) == 0) return false;
    delete p;  // its done never runs
    return true;
  }

  int Poll(absl::Duration timeout) override {
    return poll_(state_, absl::ToInt64Nanoseconds(timeout));
  }
  int PollPeer(int peer) override {
    return poll_peer_ != nullptr ? poll_peer_(state_, peer) : poll_(state_, 0);
  }
  int PollQuiet(absl::Duration timeout) override {
    return (poll_quiet_ != nullptr ? poll_quiet_ : poll_)(state_,
                                                          absl::ToInt64Nanoseconds(timeout));
  }
  int OpenWakeFd() override { return open_wake_fd_ != nullptr ? open_wake_fd_(state_) : -1; }
  bool ArmWake() override { return arm_wake_ != nullptr && arm_wake_(state_) != 0; }
  void DisarmWake() override {
    if (disarm_wake_ != nullptr) disarm_wake_(state_);
  }
  bool WatchFd(int fd) override { return watch_fd_ != nullptr && watch_fd_(state_, fd) != 0; }
  bool SpinsBeforeSleep() const override {
    return spins_before_sleep_ != nullptr && spins_before_sleep_(state_) != 0;
  }
  size_t PendingSends() const override { return pending_sends_(state_); }
  size_t EagerBytes() const override {
    const size_t b = eager_bytes_ != nullptr ? eager_bytes_(state_) : 0;
    return b != 0 ? b : Transport::EagerBytes();
  }
  void CloseWrite(int peer) override { close_write_(state_, peer); }
  void ShutdownAll() override { shutdown_all_(state_); }
  void FailPeer(int peer, const absl::Status& why) override {
    const std::string m(why.message());
    fail_peer_(state_, peer, m.c_str());
  }

 private:
  const char* const name_;
  void* const state_;
  // The table's functions, copied once (the hot path loads no table).
  decltype(hcomm_transport_v1_t::send) send_;
  decltype(hcomm_transport_v1_t::cancel) cancel_;
  decltype(hcomm_transport_v1_t::poll) poll_;
  decltype(hcomm_transport_v1_t::pending_sends) pending_sends_;
  decltype(hcomm_transport_v1_t::close_write) close_write_;
  decltype(hcomm_transport_v1_t::shutdown_all) shutdown_all_;
  decltype(hcomm_transport_v1_t::fail_peer) fail_peer_;
  decltype(hcomm_transport_v1_t::eager_bytes) eager_bytes_;
  decltype(hcomm_transport_v1_t::try_send_now) try_send_now_;
  decltype(hcomm_transport_v1_t::take_whole) take_whole_;
  decltype(hcomm_transport_v1_t::poll_peer) poll_peer_;
  decltype(hcomm_transport_v1_t::poll_quiet) poll_quiet_;
  decltype(hcomm_transport_v1_t::spins_before_sleep) spins_before_sleep_;
  decltype(hcomm_transport_v1_t::open_wake_fd) open_wake_fd_;
  decltype(hcomm_transport_v1_t::arm_wake) arm_wake_;
  decltype(hcomm_transport_v1_t::disarm_wake) disarm_wake_;
  decltype(hcomm_transport_v1_t::watch_fd) watch_fd_;
};

absl::Status Provider::Validate(const hcomm_transport_v1_t* t) {
  if (t == nullptr) return InvalidArgument("its entry point returned no table");
  if (t->abi_version != HCOMM_TRANSPORT_ABI_VERSION) {
    return NotSupported(absl::StrCat("its table is of transport ABI version ", t->abi_version,
                                     "; this library knows version ",
                                     HCOMM_TRANSPORT_ABI_VERSION));
  }
  if (t->struct_size < kRequiredBytes) {
    return InvalidArgument(absl::StrCat("its table is ", t->struct_size,
                                        " bytes, shorter than the ", kRequiredBytes,
                                        " of version 1's required functions"));
  }
  const char* name = t->name;
  if (name == nullptr || *name == '\0' || strlen(name) > 31 ||
      !std::all_of(name, name + strlen(name), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      })) {
    return InvalidArgument(absl::StrCat("its transport name '", name == nullptr ? "" : name,
                                        "' is not 1-31 of [a-z0-9_]"));
  }
  for (const Required& r : kRequired) {
    if (!r.present(*t)) {
      return InvalidArgument(absl::StrCat("transport '", name, "' leaves the required function '",
                                          r.name, "' NULL"));
    }
  }
  return absl::OkStatus();
}

Provider::Provider(const hcomm_transport_v1_t* table, ProviderSetup* setup, FrameSink* sink)
    : table_(table), setup_(setup), sink_(sink) {}

absl::StatusOr<std::unique_ptr<Provider>> Provider::Open(const hcomm_transport_v1_t* table,
                                                         const ProviderJob& job,
                                                         ProviderSetup* setup, FrameSink* sink) {
  HCOMM_RETURN_IF_ERROR(Validate(table));
  std::unique_ptr<Provider> p(new Provider(table, setup, sink));
  p->job_ = job;
  hcomm_transport_host_t& h = p->host_;
  memset(&h, 0, sizeof h);
  h.abi_version = HCOMM_TRANSPORT_ABI_VERSION;
  h.struct_size = sizeof h;
  h.rank = job.rank;
  h.world_size = job.world_size;
  h.header_bytes = kFrameMetaBytes;
  h.job_key = p->job_.job_key.c_str();
  h.host_id = p->job_.host_id.c_str();
  h.address = p->job_.advertise_address.c_str();
  h.ctx = p.get();
  h.set_error = &SetError;
  h.put = &PutThunk;
  h.get = &GetThunk;
  h.time_left_ms = &TimeLeftMs;
  h.check = &CheckThunk;
  h.authenticate = &AuthenticateThunk;
  h.on_frame = &OnFrame;
  h.on_payload = &OnPayload;
  h.on_whole_frame = &OnWholeFrame;
  h.on_connection_lost = &OnConnectionLost;
  void* state = nullptr;
  hcomm_status_t s = table->open(&p->host_, &state);
  if (s != HCOMM_SUCCESS) return p->Failed(s, "opening it");
  p->state_ = state;
  p->transport_ = std::make_unique<TableTransport>(table, state, table->name);
  return p;
}

Provider::~Provider() {
  transport_.reset();
  if (state_ != nullptr) table_->close(state_);
}

absl::Status Provider::Failed(hcomm_status_t code, const std::string& doing) {
  std::string why;
  {
    absl::MutexLock l(&error_mu_);
    why.swap(error_);
  }
  if (why.empty()) why = absl::StrCat("it returned ", ErrorCodeName(static_cast<ErrorCode>(code)));
  if (code == HCOMM_SUCCESS || static_cast<int>(code) > HCOMM_ERR_INTERNAL) {
    code = HCOMM_ERR_INTERNAL;
  }
  return FromC(code, absl::StrCat("transport ", name(), ": ", doing, ": ", why));
}

absl::StatusOr<std::string> Provider::Publish() {
  char card[HCOMM_TRANSPORT_CARD_BYTES];
  card[0] = '\0';
  hcomm_status_t s = table_->publish(state_, card, sizeof card);
  if (s != HCOMM_SUCCESS) {
    std::string why;
    {
      absl::MutexLock l(&error_mu_);
      why.swap(error_);
    }
    if (why.empty()) why = absl::StrCat("it returned ", ErrorCodeName(static_cast<ErrorCode>(s)));
    return NoDevice(why);
  }
  card[sizeof card - 1] = '\0';
  return std::string(card);
}

bool Provider::CanReach(int peer, const std::string& peer_host, const std::string& peer_card) {
  return table_->can_reach(state_, peer, peer_host.c_str(), peer_card.c_str()) != 0;
}

absl::Status Provider::Connect(const std::vector<int>& peers) {
  hcomm_status_t s = table_->connect(state_, peers.data(), static_cast<int>(peers.size()));
  if (s != HCOMM_SUCCESS) return Failed(s, "connecting");
  return absl::OkStatus();
}

void Provider::SetError(void* ctx, const char* message) {
  Provider* p = static_cast<Provider*>(ctx);
  absl::MutexLock l(&p->error_mu_);
  p->error_ = message != nullptr ? message : "";
}

hcomm_status_t Provider::PutThunk(void* ctx, const char* key, const void* value, size_t len) {
  Provider* p = static_cast<Provider*>(ctx);
  absl::Status s = p->setup_->Put(p->name(), key,
                                  std::string(static_cast<const char*>(value), len));
  if (!s.ok()) SetError(ctx, std::string(s.message()).c_str());
  return ToC(s);
}

hcomm_status_t Provider::GetThunk(void* ctx, int peer, const char* key, void* buf, size_t cap,
                                  size_t* len) {
  Provider* p = static_cast<Provider*>(ctx);
  absl::StatusOr<std::string> v = p->setup_->Get(p->name(), peer, key);
  if (!v.ok()) {
    SetError(ctx, std::string(v.status().message()).c_str());
    return ToC(v.status());
  }
  *len = v->size();
  memcpy(buf, v->data(), std::min(cap, v->size()));
  return HCOMM_SUCCESS;
}

int64_t Provider::TimeLeftMs(void* ctx) {
  const absl::Duration left = static_cast<Provider*>(ctx)->setup_->Deadline() - MonoNow();
  return std::max<int64_t>(0, absl::ToInt64Milliseconds(left));
}

hcomm_status_t Provider::CheckThunk(void* ctx) {
  absl::Status s = static_cast<Provider*>(ctx)->setup_->Check();
  if (!s.ok()) SetError(ctx, std::string(s.message()).c_str());
  return ToC(s);
}

hcomm_status_t Provider::AuthenticateThunk(void* ctx, int fd, int as_server) {
  absl::Status s = static_cast<Provider*>(ctx)->setup_->Authenticate(fd, as_server != 0);
  if (!s.ok()) SetError(ctx, std::string(s.message()).c_str());
  return ToC(s);
}

void* Provider::OnFrame(void* ctx, int peer, const void* header, uint64_t payload_len) {
  return static_cast<Provider*>(ctx)->sink_->OnFrame(
      peer, *static_cast<const FrameMeta*>(header), payload_len);
}

void Provider::OnPayload(void* ctx, int peer, const void* header, uint64_t payload_len) {
  static_cast<Provider*>(ctx)->sink_->OnPayload(peer, *static_cast<const FrameMeta*>(header),
                                                 payload_len);
}

void Provider::OnWholeFrame(void* ctx, int peer, const void* header, const void* payload,
                            uint64_t payload_len) {
  static_cast<Provider*>(ctx)->sink_->OnWholeFrame(peer, *static_cast<const FrameMeta*>(header),
                                                    payload, payload_len);
}

void Provider::OnConnectionLost(void* ctx, int peer, const char* why) {
  static_cast<Provider*>(ctx)->sink_->OnConnectionLost(
      peer, PeerFailure(why != nullptr ? why : "the connection was lost"));
}

}  // namespace hcomm
