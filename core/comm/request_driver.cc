#include "core/comm/request_driver.h"

#include "core/base/clock.h"
#include "core/p2p/engine.h"

namespace hcomm {

absl::Status RequestDriver::Wait(Request* r, MonoTime deadline) {
  absl::Status s = engine_->Wait(r, deadline);
  if (!r->done.load(std::memory_order_acquire)) return s;
  return Finished(r);
}

absl::Status RequestDriver::Finished(Request* r) {
  const absl::Status& done = FinishRequest(r);
  if (r->flight != 0) engine_->flight().End(r->flight, done.ok());
  return done;
}

bool RequestDriver::Test(Request* r) {
  if (!r->done.load(std::memory_order_acquire) && !engine_->Test(r)) return false;
  Finished(r).IgnoreError();
  return true;
}

void RequestDriver::Release(const std::shared_ptr<Request>& r) { engine_->Release(r); }

}  // namespace hcomm
