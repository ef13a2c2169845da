/* A plugin built for a transport ABI this library does not know (2): its
 * table must be refused, naming both versions, and nothing of it called. */
#include <string.h>

#include "hcomm/hcomm_transport.h"

typedef struct {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* name;
  void* functions[40];
} future_table_t;

static future_table_t table = {2, sizeof(future_table_t), "future", {0}};

__attribute__((visibility("default"))) const hcomm_transport_v1_t* hcomm_transport_plugin(void) {
  return (const hcomm_transport_v1_t*)&table;
}
