// The C shells around hcomm's C++ objects, and the one place where an
// absl::Status becomes an hcomm_status_t.
#ifndef HCOMM_C_API_INTERNAL_H_
#define HCOMM_C_API_INTERNAL_H_

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "c_api/forks.h"
#include "core/comm/channel.h"
#include "core/comm/comm_scheduler.h"
#include "core/comm/comm_stream.h"
#include "core/base/config.h"
#include "core/comm/communicator.h"
#include "core/comm/request_driver.h"
#include "core/p2p/request.h"
#include "hcomm/hcomm.h"

struct hcomm_config_s {
  hcomm::Config impl;
  bool destroyed = false;  // by hcomm_config_destroy (the handle stays)
};

struct hcomm_comm_s {
  std::unique_ptr<hcomm::Communicator> impl;
  // Who made it (c_api/forks.h): a fork's child does not use its parent's.
  uint32_t forks = hcomm::ForkCount();
  pid_t pid = getpid();
};

// A request handle is a slot of hcomm_c::RequestSlots (c_api/request_slots.h).
struct hcomm_request_s {
  // Between hcomm_isend/irecv/iallreduce and hcomm_request_free.
  std::atomic<bool> live{false};
  std::shared_ptr<hcomm::Request> impl;
  // What drives it, kept alive by the request; the communicator itself may
  // be destroyed first.
  std::shared_ptr<hcomm::RequestDriver> driver;
  absl::Duration timeout;
  // World rank -> rank of the communicator the request was made on.
  std::shared_ptr<const std::vector<int>> world_to_group;
  // Who made it (c_api/forks.h), as for communicators.
  uint32_t forks = 0;
  pid_t pid = 0;
};

struct hcomm_channel_s {
  std::unique_ptr<hcomm::Channel> impl;
};

struct hcomm_stream_s {
  std::unique_ptr<hcomm::CommStream> impl;
  // A scheduler's stream, handed to its tasks: the scheduler ends it
  // (hcomm_stream_destroy refuses).
  bool borrowed = false;
  // Who made it (c_api/forks.h), as for communicators.
  uint32_t forks = hcomm::ForkCount();
  pid_t pid = getpid();
};

struct hcomm_scheduler_s {
  std::unique_ptr<hcomm::CommScheduler> impl;
  // The handles its tasks were given, one per stream (released, not
  // deleted, with the scheduler: the streams are its).
  absl::Mutex mu;
  std::map<hcomm::CommStream*, hcomm_stream_s*> streams ABSL_GUARDED_BY(mu);
  uint32_t forks = hcomm::ForkCount();
  pid_t pid = getpid();
};

struct hcomm_event_s {
  std::unique_ptr<hcomm::Event> impl;
  // How long hcomm_event_synchronize waits without progress: the timeout
  // of the communicator of the stream it was last recorded on.
  std::atomic<int64_t> stall_ms{60000};
};

#endif  // HCOMM_C_API_INTERNAL_H_
