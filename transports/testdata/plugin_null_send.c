/* A version 1 table that leaves one required function (send) NULL: refused
 * at load, naming the function, instead of crashing at the first send. */
#include <string.h>

#include "hcomm/hcomm_transport.h"

static hcomm_status_t Open(const hcomm_transport_host_t* host, void** state) {
  (void)host;
  *state = 0;
  return HCOMM_SUCCESS;
}
static hcomm_status_t Publish(void* state, char* card, size_t cap) {
  (void)state;
  (void)cap;
  card[0] = '\0';
  return HCOMM_SUCCESS;
}
static int CanReach(void* state, int peer, const char* host, const char* card) {
  (void)state, (void)peer, (void)host, (void)card;
  return 0;
}
static hcomm_status_t Connect(void* state, const int* peers, int n) {
  (void)state, (void)peers, (void)n;
  return HCOMM_SUCCESS;
}
static void Close(void* state) { (void)state; }
static int Cancel(void* state, int peer, uint64_t h) {
  (void)state, (void)peer, (void)h;
  return 0;
}
static int Poll(void* state, int64_t t) {
  (void)state, (void)t;
  return 0;
}
static size_t Pending(void* state) {
  (void)state;
  return 0;
}
static void PeerOnly(void* state, int peer) { (void)state, (void)peer; }
static void FailPeer(void* state, int peer, const char* why) { (void)state, (void)peer, (void)why; }

__attribute__((visibility("default"))) const hcomm_transport_v1_t* hcomm_transport_plugin(void) {
  static hcomm_transport_v1_t table;
  memset(&table, 0, sizeof table);
  table.abi_version = HCOMM_TRANSPORT_ABI_VERSION;
  table.struct_size = sizeof table;
  table.name = "nullsend";
  table.open = Open;
  table.publish = Publish;
  table.can_reach = CanReach;
  table.connect = Connect;
  table.close = Close;
  /* table.send stays NULL */
  table.cancel = Cancel;
  table.poll = Poll;
  table.pending_sends = Pending;
  table.close_write = PeerOnly;
  table.shutdown_all = Close;
  table.fail_peer = FailPeer;
  return &table;
}
