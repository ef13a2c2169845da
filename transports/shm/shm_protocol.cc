#include "transports/shm/shm_protocol.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/shm_file.h"
#include "transports/shm/shm_transport.h"
#include "transports/transport_protocol.h"

namespace hcomm {

namespace {

class ShmProtocol final : public TransportProtocol<ShmTransport> {
 public:
  using TransportProtocol::TransportProtocol;

  hcomm_status_t Publish(std::string* card) override {
    absl::Status probe = ShmTransport::Probe(host().job_key, rank());
    if (!probe.ok()) {
      return Fail(HCOMM_ERR_NO_DEVICE,
                  absl::StrCat("this rank cannot use shared memory: ", probe.message()));
    }
    card_ = ShmTransport::Domain();
    *card = card_;
    return HCOMM_SUCCESS;
  }

  // Ranks of one host_id share segments only where they see the same
  // /dev/shm (not two machines of one name, nor two containers).
  bool CanReach(int peer, const char* peer_host, const char* peer_card) override {
    return !card_.empty() && strcmp(peer_host, host().host_id) == 0 && card_ == peer_card;
  }

  hcomm_status_t Connect(const std::vector<int>& peers) override {
    auto created = ShmTransport::Create(rank(), world_size(), peers, host().job_key, sink());
    if (!created.ok()) return Fail(created.status());
    transport_ = std::move(created).value();
    transport_->SetCpusShared(host().cpus_shared != 0);
    if (transport_->ring_bytes() < transport_->planned_ring_bytes()) {
      // Not an error, but slower for large messages: said whatever
      // HCOMM_DEBUG is, by each rank whose rings are smaller (those that
      // made theirs last found the least room).
      fprintf(stderr,
              "hcomm WARN: rank %d: shared-memory rings of %zu KiB instead of %zu KiB: /dev/shm "
              "is short of room %s\n",
              rank(), transport_->ring_bytes() >> 10, transport_->planned_ring_bytes() >> 10,
              kLargerDevShm);
    }
    if (hcomm_status_t s = Put("seg", transport_->Address()); s != HCOMM_SUCCESS) return s;
    for (int p : peers) {
      std::string addr;
      if (hcomm_status_t s = Get(p, "seg", &addr); s != HCOMM_SUCCESS) return s;
      absl::Status c = transport_->Connect(p, addr, Deadline());
      if (!c.ok()) return Fail(Annotate(c, absl::StrCat("attaching to rank ", p, "'s segment")));
    }
    // Every peer has attached to ours once each says so: then the segment's
    // name goes, and nothing is left in /dev/shm even if we are killed.
    if (hcomm_status_t s = Put("ok", "1"); s != HCOMM_SUCCESS) return s;
    for (int p : peers) {
      std::string ok;
      if (hcomm_status_t s = Get(p, "ok", &ok); s != HCOMM_SUCCESS) return s;
    }
    absl::Status finished = transport_->FinishSetup();
    return finished.ok() ? HCOMM_SUCCESS : Fail(finished);
  }

 private:
  std::string card_;  // set by Publish
};

constexpr hcomm_transport_v1_t kShmTable = ProtocolTable<ShmProtocol>("shm");

}  // namespace

const hcomm_transport_v1_t* ShmTransportTable() { return &kShmTable; }

}  // namespace hcomm
