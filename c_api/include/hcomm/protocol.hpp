// hcomm::Protocol: a transport plugin written as a C++ class, over the C
// table of hcomm/hcomm_transport.h (header-only; C++17).
//
//   class UdsProtocol : public hcomm::Protocol {
//    public:
//     using Protocol::Protocol;
//     hcomm_status_t Publish(std::string* card) override;
//     bool CanReach(int peer, const char* peer_host, const char* peer_card) override;
//     hcomm_status_t Connect(const std::vector<int>& peers) override;
//     hcomm_status_t Send(int peer, const void* header, const void* payload, size_t len,
//                         hcomm_transport_done_fn done, void* done_arg,
//                         uint64_t* handle) override;
//     ...   // Cancel, Poll, PendingSends, CloseWrite, ShutdownAll, FailPeer
//   };
//   HCOMM_REGISTER_PROTOCOL("uds", UdsProtocol)
//
// The macro exports the plugin's entry point (hcomm_transport_plugin); build
// the class into a shared object and name it in HCOMM_PLUGINS. Each method
// has the contract of the table function of the same name in
// hcomm_transport.h, and the class is made once per job by the library
// (open) and deleted at its end (close). The built-in transports of hcomm
// are Protocols too, registered through the same table.
//
// No exception crosses into the library: one thrown from a method becomes
// HCOMM_ERR_INTERNAL with its what() as the reason (or is dropped where the
// table function returns nothing).
#ifndef HCOMM_PROTOCOL_HPP_
#define HCOMM_PROTOCOL_HPP_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "hcomm/hcomm_transport.h"

#if defined(__GNUC__)
#define HCOMM_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define HCOMM_PLUGIN_EXPORT
#endif

namespace hcomm {

namespace protocol_internal {
template <class P>
struct Thunks;
}  // namespace protocol_internal

class Protocol {
 public:
  // `host` is the library's, valid until the object is deleted.
  explicit Protocol(const hcomm_transport_host_t* host) : host_(host) {}
  virtual ~Protocol() = default;
  Protocol(const Protocol&) = delete;
  Protocol& operator=(const Protocol&) = delete;

  // --- Setup ---
  // Right after construction: what may fail in making the instance.
  virtual hcomm_status_t Open() { return HCOMM_SUCCESS; }
  virtual hcomm_status_t Publish(std::string* card) {
    card->clear();
    return HCOMM_SUCCESS;
  }
  virtual bool CanReach(int peer, const char* peer_host, const char* peer_card) = 0;
  virtual hcomm_status_t Connect(const std::vector<int>& peers) = 0;

  // --- Moving bytes ---
  virtual hcomm_status_t Send(int peer, const void* header, const void* payload, size_t len,
                              hcomm_transport_done_fn done, void* done_arg,
                              uint64_t* handle) = 0;
  virtual bool Cancel(int peer, uint64_t handle) = 0;
  virtual int Poll(int64_t timeout_ns) = 0;
  virtual size_t PendingSends() = 0;
  virtual void CloseWrite(int peer) = 0;
  virtual void ShutdownAll() = 0;
  virtual void FailPeer(int peer, const char* why) = 0;

  // --- Optional; the defaults are what the library does without them ---
  virtual size_t EagerBytes() { return 0; }
  virtual bool TrySendNow(int /*peer*/, const void* /*header*/, const void* /*payload*/,
                          size_t /*len*/) {
    return false;
  }
  virtual int TakeWhole(int /*peer*/, uint64_t /*max_payload*/, hcomm_transport_take_fn /*take*/,
                        void* /*take_arg*/) {
    return -1;
  }
  virtual int PollPeer(int /*peer*/) { return Poll(0); }
  virtual int PollQuiet(int64_t timeout_ns) { return Poll(timeout_ns); }
  virtual bool SpinsBeforeSleep() { return false; }
  virtual int OpenWakeFd() { return -1; }
  virtual bool ArmWake() { return false; }
  virtual void DisarmWake() {}
  virtual bool WatchFd(int /*fd*/) { return false; }

 protected:
  const hcomm_transport_host_t& host() const { return *host_; }
  int rank() const { return host_->rank; }
  int world_size() const { return host_->world_size; }
  size_t header_bytes() const { return host_->header_bytes; }

  // Returns `code` with `why` as the reason the library reports.
  hcomm_status_t Fail(hcomm_status_t code, const std::string& why) const {
    host_->set_error(host_->ctx, why.c_str());
    return code;
  }
  // The host's setup services (hcomm_transport_host_t).
  hcomm_status_t Put(const std::string& key, const std::string& value) const {
    return host_->put(host_->ctx, key.c_str(), value.data(), value.size());
  }
  hcomm_status_t Get(int peer, const std::string& key, std::string* value) const {
    size_t len = 0;
    char small[256];
    hcomm_status_t s = host_->get(host_->ctx, peer, key.c_str(), small, sizeof small, &len);
    if (s != HCOMM_SUCCESS) return s;
    if (len <= sizeof small) {
      value->assign(small, len);
      return HCOMM_SUCCESS;
    }
    value->resize(len);
    return host_->get(host_->ctx, peer, key.c_str(), &(*value)[0], len, &len);
  }
  int64_t TimeLeftMs() const { return host_->time_left_ms(host_->ctx); }
  hcomm_status_t Authenticate(int fd, bool as_server) const {
    return host_->authenticate(host_->ctx, fd, as_server ? 1 : 0);
  }
  // Frames arriving: hand them to the library.
  void* OnFrame(int peer, const void* header, uint64_t payload_len) const {
    return host_->on_frame(host_->ctx, peer, header, payload_len);
  }
  void OnPayload(int peer, const void* header, uint64_t payload_len) const {
    host_->on_payload(host_->ctx, peer, header, payload_len);
  }
  void OnWholeFrame(int peer, const void* header, const void* payload,
                    uint64_t payload_len) const {
    host_->on_whole_frame(host_->ctx, peer, header, payload, payload_len);
  }
  void OnConnectionLost(int peer, const char* why) const {
    host_->on_connection_lost(host_->ctx, peer, why);
  }

 private:
  template <class P>
  friend struct protocol_internal::Thunks;
  const hcomm_transport_host_t* host_;
};

namespace protocol_internal {

// The table's functions for class P: each turns the C call into the
// method, and an exception into a status.
template <class P>
struct Thunks {
  static P* Of(void* state) { return static_cast<P*>(state); }
  static hcomm_status_t Internal(void* state, const char* what) {
    return Of(state)->Protocol::Fail(HCOMM_ERR_INTERNAL, what);
  }

  static hcomm_status_t Open(const hcomm_transport_host_t* host, void** state) {
    P* p = nullptr;
    try {
      p = new P(host);
      hcomm_status_t s = p->Open();
      if (s != HCOMM_SUCCESS) {
        delete p;
        return s;
      }
    } catch (const std::bad_alloc&) {
      delete p;
      host->set_error(host->ctx, "out of memory");
      return HCOMM_ERR_OUT_OF_MEM;
    } catch (const std::exception& e) {
      delete p;
      host->set_error(host->ctx, e.what());
      return HCOMM_ERR_INTERNAL;
    } catch (...) {
      delete p;
      host->set_error(host->ctx, "an unknown exception");
      return HCOMM_ERR_INTERNAL;
    }
    *state = p;
    return HCOMM_SUCCESS;
  }
  static hcomm_status_t Publish(void* state, char* card, size_t cap) {
    try {
      std::string c;
      hcomm_status_t s = Of(state)->Publish(&c);
      if (s != HCOMM_SUCCESS) return s;
      if (c.size() >= cap) return Internal(state, "card longer than HCOMM_TRANSPORT_CARD_BYTES");
      c.copy(card, c.size());
      card[c.size()] = '\0';
      return HCOMM_SUCCESS;
    } catch (const std::exception& e) {
      return Internal(state, e.what());
    } catch (...) {
      return Internal(state, "an unknown exception");
    }
  }
  static int CanReach(void* state, int peer, const char* host, const char* card) {
    try {
      return Of(state)->CanReach(peer, host, card) ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
  static hcomm_status_t Connect(void* state, const int* peers, int npeers) {
    try {
      return Of(state)->Connect(std::vector<int>(peers, peers + npeers));
    } catch (const std::exception& e) {
      return Internal(state, e.what());
    } catch (...) {
      return Internal(state, "an unknown exception");
    }
  }
  static void Close(void* state) {
    try {
      delete Of(state);
    } catch (...) {
    }
  }
  static hcomm_status_t Send(void* state, int peer, const void* header, const void* payload,
                             size_t len, hcomm_transport_done_fn done, void* done_arg,
                             uint64_t* handle) {
    try {
      return Of(state)->Send(peer, header, payload, len, done, done_arg, handle);
    } catch (const std::exception& e) {
      return Internal(state, e.what());
    } catch (...) {
      return Internal(state, "an unknown exception");
    }
  }
  static int Cancel(void* state, int peer, uint64_t handle) {
    try {
      return Of(state)->Cancel(peer, handle) ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
  static int Poll(void* state, int64_t timeout_ns) {
    try {
      return Of(state)->Poll(timeout_ns);
    } catch (...) {
      return 0;
    }
  }
  static size_t PendingSends(void* state) {
    try {
      return Of(state)->PendingSends();
    } catch (...) {
      return 0;
    }
  }
  static void CloseWrite(void* state, int peer) {
    try {
      Of(state)->CloseWrite(peer);
    } catch (...) {
    }
  }
  static void ShutdownAll(void* state) {
    try {
      Of(state)->ShutdownAll();
    } catch (...) {
    }
  }
  static void FailPeer(void* state, int peer, const char* why) {
    try {
      Of(state)->FailPeer(peer, why);
    } catch (...) {
    }
  }
  static size_t EagerBytes(void* state) {
    try {
      return Of(state)->EagerBytes();
    } catch (...) {
      return 0;
    }
  }
  static int TrySendNow(void* state, int peer, const void* header, const void* payload,
                        size_t len) {
    try {
      return Of(state)->TrySendNow(peer, header, payload, len) ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
  static int TakeWhole(void* state, int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                       void* take_arg) {
    try {
      return Of(state)->TakeWhole(peer, max_payload, take, take_arg);
    } catch (...) {
      return -1;
    }
  }
  static int PollPeer(void* state, int peer) {
    try {
      return Of(state)->PollPeer(peer);
    } catch (...) {
      return 0;
    }
  }
  static int PollQuiet(void* state, int64_t timeout_ns) {
    try {
      return Of(state)->PollQuiet(timeout_ns);
    } catch (...) {
      return 0;
    }
  }
  static int SpinsBeforeSleep(void* state) {
    try {
      return Of(state)->SpinsBeforeSleep() ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
  static int OpenWakeFd(void* state) {
    try {
      return Of(state)->OpenWakeFd();
    } catch (...) {
      return -1;
    }
  }
  static int ArmWake(void* state) {
    try {
      return Of(state)->ArmWake() ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
  static void DisarmWake(void* state) {
    try {
      Of(state)->DisarmWake();
    } catch (...) {
    }
  }
  static int WatchFd(void* state, int fd) {
    try {
      return Of(state)->WatchFd(fd) ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
};

}  // namespace protocol_internal

// The table of class P (derived from Protocol) under `name`.
template <class P>
constexpr hcomm_transport_v1_t ProtocolTable(const char* name) {
  using T = protocol_internal::Thunks<P>;
  return hcomm_transport_v1_t{
      HCOMM_TRANSPORT_ABI_VERSION, sizeof(hcomm_transport_v1_t), name,
      &T::Open, &T::Publish, &T::CanReach, &T::Connect, &T::Close,
      &T::Send, &T::Cancel, &T::Poll, &T::PendingSends, &T::CloseWrite, &T::ShutdownAll,
      &T::FailPeer,
      &T::EagerBytes, &T::TrySendNow, &T::TakeWhole, &T::PollPeer, &T::PollQuiet,
      &T::SpinsBeforeSleep, &T::OpenWakeFd, &T::ArmWake, &T::DisarmWake, &T::WatchFd};
}

}  // namespace hcomm

// Exports the plugin entry point of hcomm_transport.h for class CLASS
// (derived from hcomm::Protocol), whose transport the `transports` key
// then calls NAME. Once per shared object, at namespace scope.
#define HCOMM_REGISTER_PROTOCOL(NAME, CLASS)                                       \
  extern "C" HCOMM_PLUGIN_EXPORT const hcomm_transport_v1_t* hcomm_transport_plugin( \
      void) {                                                                      \
    static const hcomm_transport_v1_t table = ::hcomm::ProtocolTable<CLASS>(NAME); \
    return &table;                                                                 \
  }

#endif  // HCOMM_PROTOCOL_HPP_
