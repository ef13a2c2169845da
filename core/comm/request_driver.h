// What a request needs once its communicator may be gone: the engine that
// drives it, kept alive as long as the request's holder keeps this. The C
// API's request handles hold one (hcomm.h: requests outlive their
// communicator), so that they never reach below core/comm themselves.
//
//   std::shared_ptr<RequestDriver> d = comm.request_driver();
//   HCOMM_RETURN_IF_ERROR(d->Wait(r.get(), MonoNow() + comm.timeout()));
//
// THREAD SAFETY: every method may be called from any thread.
#ifndef HCOMM_CORE_COMM_REQUEST_DRIVER_H_
#define HCOMM_CORE_COMM_REQUEST_DRIVER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/p2p/request.h"

namespace hcomm {

class Engine;

class RequestDriver {
 public:
  explicit RequestDriver(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}

  // The request's status once it ended, or Timeout naming what is pending
  // at `deadline` (the request stays pending).
  absl::Status Wait(Request* r, MonoTime deadline);
  // Progress without blocking; whether `r` has ended.
  bool Test(Request* r);
  // For a request that is done: its status (FinishRequest), its flight
  // recorder entry ended.
  absl::Status Finished(Request* r);
  // The holder lets go: a receive nothing has reached is withdrawn.
  void Release(const std::shared_ptr<Request>& r);

 private:
  std::shared_ptr<Engine> engine_;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_REQUEST_DRIVER_H_
