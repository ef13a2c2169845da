// The C shells around hcomm's C++ objects, and the one place where an
// absl::Status becomes an hcomm_status_t.
#ifndef HCOMM_C_API_INTERNAL_H_
#define HCOMM_C_API_INTERNAL_H_

#include <memory>

#include "core/communicator.h"
#include "core/config.h"
#include "core/request.h"
#include "hcomm/hcomm.h"

struct hcomm_config_s {
  hcomm::Config impl;
};

struct hcomm_comm_s {
  std::unique_ptr<hcomm::Communicator> impl;
};

struct hcomm_request_s {
  std::shared_ptr<hcomm::Request> impl;
  hcomm::Communicator* comm;  // valid while impl is pending
};

#endif  // HCOMM_C_API_INTERNAL_H_
