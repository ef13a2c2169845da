// The TCP transport's entry in the registry: its table
// (hcomm/hcomm_transport.h), through which the library sets it up and moves
// bytes as it does for any plugin.
//
// Card: "<ip>:<port>" of a socket listening on the address of this host
// that the others route to (host->address). Reach: every rank. Connect:
// each rank dials the lower ranks of its peers and accepts the higher; both
// ends of a connection prove the job's token (host->authenticate), then the
// dialer says who it is ("<job key> <rank> <world size>").
#ifndef HCOMM_TRANSPORTS_TCP_TCP_PROTOCOL_H_
#define HCOMM_TRANSPORTS_TCP_TCP_PROTOCOL_H_

#include "hcomm/hcomm_transport.h"

namespace hcomm {

const hcomm_transport_v1_t* TcpTransportTable();

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_TCP_TCP_PROTOCOL_H_
