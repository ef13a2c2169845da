// The shared-memory transport's entry in the registry: its table
// (hcomm/hcomm_transport.h), through which the library sets it up and moves
// bytes as it does for any plugin.
//
// Card: the /dev/shm this rank sees (ShmTransport::Domain()); a rank that
// cannot make segments there publishes none, saying why. Reach: ranks of
// one host_id whose cards match. Connect: each rank creates its segment,
// puts its address ("seg"), attaches to every peer's, says it has ("ok"),
// and unlinks its segment once every peer has.
#ifndef HCOMM_TRANSPORTS_SHM_SHM_PROTOCOL_H_
#define HCOMM_TRANSPORTS_SHM_SHM_PROTOCOL_H_

#include "hcomm/hcomm_transport.h"

namespace hcomm {

const hcomm_transport_v1_t* ShmTransportTable();

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_SHM_SHM_PROTOCOL_H_
