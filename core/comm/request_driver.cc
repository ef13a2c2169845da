#include "core/comm/request_driver.h"

#include "core/p2p/engine.h"

namespace hcomm {

absl::Status RequestDriver::Wait(Request* r, absl::Time deadline) {
  return engine_->Wait(r, deadline);
}

bool RequestDriver::Test(Request* r) { return engine_->Test(r); }

void RequestDriver::Release(const std::shared_ptr<Request>& r) { engine_->Release(r); }

}  // namespace hcomm
