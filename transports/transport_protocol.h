// The built-in transports as hcomm::Protocols (hcomm/protocol.hpp): their
// bytes move through a C++ Transport (transport.h), which this adapter
// drives from the plugin table's calls, so that the library reaches shm and
// tcp through the same table as any plugin.
//
//   class ShmProtocol final : public TransportProtocol<ShmTransport> {
//     ... Publish, CanReach, Connect (which sets transport_) ...
//   };
//   constexpr hcomm_transport_v1_t kShm = ProtocolTable<ShmProtocol>("shm");
//
// The moving-bytes calls go to transport_, set by Connect; the library makes
// none of them before Connect succeeded.
#ifndef HCOMM_TRANSPORTS_TRANSPORT_PROTOCOL_H_
#define HCOMM_TRANSPORTS_TRANSPORT_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "hcomm/protocol.hpp"
#include "transports/transport.h"

namespace hcomm {

template <class T>
class TransportProtocol : public Protocol {
 public:
  explicit TransportProtocol(const hcomm_transport_host_t* host) : Protocol(host), sink_(this) {}

  hcomm_status_t Open() override {
    if (header_bytes() != kFrameMetaBytes) {
      return Fail(HCOMM_ERR_INTERNAL, "the library's frame header is not kFrameMetaBytes");
    }
    return HCOMM_SUCCESS;
  }

  hcomm_status_t Send(int peer, const void* header, const void* payload, size_t len,
                      hcomm_transport_done_fn done, void* done_arg, uint64_t* handle) override {
    SendCallback cb;
    if (done != nullptr) {
      cb = [done, done_arg](absl::Status s) {
        done(done_arg, static_cast<hcomm_status_t>(CodeOf(s)),
             s.ok() ? nullptr : std::string(s.message()).c_str());
      };
    }
    *handle = transport_->Send(peer, Meta(header), payload, len, std::move(cb));
    return HCOMM_SUCCESS;
  }
  bool Cancel(int peer, uint64_t handle) override { return transport_->Cancel(peer, handle); }
  int Poll(int64_t timeout_ns) override {
    return transport_->Poll(absl::Nanoseconds(timeout_ns));
  }
  size_t PendingSends() override { return transport_->PendingSends(); }
  void CloseWrite(int peer) override { transport_->CloseWrite(peer); }
  void ShutdownAll() override { transport_->ShutdownAll(); }
  void FailPeer(int peer, const char* why) override {
    transport_->FailPeer(peer, PeerFailure(why));
  }
  size_t EagerBytes() override { return transport_->EagerBytes(); }
  bool TrySendNow(int peer, const void* header, const void* payload, size_t len) override {
    return transport_->TrySendNow(peer, Meta(header), payload, len);
  }
  int TakeWhole(int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                void* take_arg) override {
    return transport_->TakeWhole(peer, max_payload, take, take_arg);
  }
  int PollPeer(int peer) override { return transport_->PollPeer(peer); }
  int PollQuiet(int64_t timeout_ns) override {
    return transport_->PollQuiet(absl::Nanoseconds(timeout_ns));
  }
  bool SpinsBeforeSleep() override { return transport_->SpinsBeforeSleep(); }
  int OpenWakeFd() override { return transport_->OpenWakeFd(); }
  bool ArmWake() override { return transport_->ArmWake(); }
  void DisarmWake() override { transport_->DisarmWake(); }
  bool WatchFd(int fd) override { return transport_->WatchFd(fd); }

 protected:
  // What the Transport reports arriving goes to the library.
  FrameSink* sink() { return &sink_; }
  // The deadline of init (for the Transport's own setup calls).
  MonoTime Deadline() const { return MonoNow() + absl::Milliseconds(TimeLeftMs()); }
  hcomm_status_t Fail(const absl::Status& s) const {
    return Protocol::Fail(static_cast<hcomm_status_t>(CodeOf(s)), std::string(s.message()));
  }
  using Protocol::Fail;

  std::unique_ptr<T> transport_;

 private:
  static const FrameMeta& Meta(const void* header) {
    return *static_cast<const FrameMeta*>(header);
  }

  class Sink final : public FrameSink {
   public:
    explicit Sink(TransportProtocol* p) : p_(p) {}
    void* OnFrame(int peer, const FrameMeta& meta, uint64_t payload_len) override {
      return p_->OnFrame(peer, meta.bytes, payload_len);
    }
    void OnPayload(int peer, const FrameMeta& meta, uint64_t payload_len) override {
      p_->OnPayload(peer, meta.bytes, payload_len);
    }
    void OnWholeFrame(int peer, const FrameMeta& meta, const void* payload,
                      uint64_t payload_len) override {
      p_->OnWholeFrame(peer, meta.bytes, payload, payload_len);
    }
    void OnConnectionLost(int peer, const absl::Status& status) override {
      p_->OnConnectionLost(peer, std::string(status.message()).c_str());
    }

   private:
    TransportProtocol* const p_;
  };
  Sink sink_;
};

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_TRANSPORT_PROTOCOL_H_
