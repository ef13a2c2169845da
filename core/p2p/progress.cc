// Progress: the background thread, polling the transports, and waiting for
// a request by its deadline (with a timeout that says what was pending).
#include "core/base/priority.h"
#include "core/p2p/engine.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/spin.h"
#include "core/base/status.h"

namespace hcomm {

void Engine::StartProgressThread() {
  if (transports_.empty()) return;
  progress_thread_ = std::thread([this] { ProgressLoop(); });
  if (const char* f = getenv("HCOMM_HANG_REPORT")) hang_report_file_ = f;
  if (job_ != nullptr) hang_thread_ = std::thread([this] { HangResponderLoop(); });
}

void Engine::ProgressLoop() {
  // Polls only while no caller is waiting (a waiting caller polls itself),
  // and stays out of the way for a moment after each wait so that a
  // ping-pong loop does not wake this thread on every message.
  // A wait ended since the last look (the count moved) or one is going on:
  // stay out for another 2 ms.
  uint64_t seen = waits_ended_.load(std::memory_order_relaxed);
  while (!stop_.load(std::memory_order_acquire)) {
    SendDueCredits();  // what a failure or a closed context freed
    const uint64_t ended = waits_ended_.load(std::memory_order_relaxed);
    if (active_waiters_.load(std::memory_order_acquire) > 0 || ended != seen) {
      seen = ended;
      absl::MutexLock l(&bg_mu_);
      bg_cv_.WaitFor(&bg_mu_, absl::Milliseconds(2));
      continue;
    }
    if (progress_mu_.TryLock()) {
      PollAll(absl::Milliseconds(10), /*quiet=*/true);
      progress_mu_.Unlock();
    } else {
      absl::MutexLock l(&bg_mu_);
      bg_cv_.WaitFor(&bg_mu_, absl::Milliseconds(1));
    }
  }
}

int Engine::PollAll(absl::Duration block, bool quiet) {
  if (torn_down_.load(std::memory_order_acquire)) return 0;  // Destroy shut them
  if (transports_.size() == 1) {
    return quiet ? transports_[0]->PollQuiet(block) : transports_[0]->Poll(block);
  }
  int events = 0;
  for (auto& t : transports_) events += t->Poll(absl::ZeroDuration());
  if (events > 0 || block <= absl::ZeroDuration() || transports_.empty()) return events;
  Transport* last = transports_.back();
  if (one_wait_) {
    Transport* first = transports_.front();
    // The last transport's wait also ends when the first one's bell rings.
    if (!first->ArmWake()) return first->Poll(absl::ZeroDuration());  // work came meanwhile
    events = quiet ? last->PollQuiet(block) : last->Poll(block);
    first->DisarmWake();
    return events + first->Poll(absl::ZeroDuration());
  }
  // Each transport sleeps in its own way (epoll, futex): take short naps on
  // the last one and look at the others between them.
  const absl::Duration nap = std::min(block, absl::Milliseconds(1));
  return quiet ? last->PollQuiet(nap) : last->Poll(nap);
}

size_t Engine::PendingSendsAll() const {
  size_t n = 0;
  for (auto& t : transports_) n += t->PendingSends();
  return n;
}

void Engine::PollOnce(absl::Duration block) {
  PollAll(block);
}

absl::Status Engine::Wait(Request* r, MonoTime deadline, MonoTime since) {
  // A receive from one peer over a transport that does not spin by itself
  // looks at that peer's connection alone while it spins (a socket read
  // instead of a readiness call and then the read), and at everything every
  // few looks.
  const int direct_peer = r->kind == Request::Kind::kRecv && !transport_spins_ &&
                                  r->peer >= 0 && r->peer < size_ && r->peer != rank_ &&
                                  !route_.empty() && route_[r->peer] != nullptr
                              ? r->peer
                              : -1;
  unsigned looks = 0;
  auto poll_spinning = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (direct_peer >= 0 && ++looks % 8 != 0 && !torn_down_.load(std::memory_order_acquire)) {
      return route_[direct_peer]->PollPeer(direct_peer);
    }
    return PollAll(absl::ZeroDuration());
  };
  // A collective request is completed by the thread that runs it
  // (CompleteExternal), not by anything a poll here would see: its waiter
  // sleeps until that completion signals it. Polling instead would hold
  // the transports (which the running collective may need) and sleep in
  // the kernel's poll, deaf to the completion, up to 50 ms at a time.
  const bool external = r->kind == Request::Kind::kCollective;
  if (!r->done.load(std::memory_order_acquire) && !transports_.empty() && !external &&
      progress_mu_.TryLock()) {
    // What we wait for has often arrived already: look before reading the
    // clock.
    poll_spinning();
    progress_mu_.Unlock();
  }
  if (!r->done.load(std::memory_order_acquire)) {
    active_waiters_.fetch_add(1, std::memory_order_acq_rel);
    MonoTime now = MonoNow();
    // A stream's own thread does not spin: the program computes meanwhile.
    const bool background = OnBackgroundThread();
    const absl::Duration spin = background ? absl::ZeroDuration() : spin_;
    MonoTime spin_until = now + spin;
    for (bool first = true; !r->done.load(std::memory_order_acquire); first = false) {
      if (!first) now = MonoNow();
      if (now >= deadline || InterruptNow(now)) break;
      if (!transports_.empty() && !external && progress_mu_.TryLock()) {
        absl::Duration block = now < spin_until && !transport_spins_
                                   ? absl::ZeroDuration()
                                   : std::min(deadline - now, absl::Milliseconds(50));
        int events = block == absl::ZeroDuration() ? poll_spinning() : PollAll(block, background);
        progress_mu_.Unlock();
        // Keep spinning while data flows (a large transfer is a stream of
        // events); sleep in the kernel only after spin_ of silence.
        if (events > 0) {
          if (!transport_spins_) spin_until = MonoNow() + spin;
        } else if (block == absl::ZeroDuration()) {
          // Nothing yet. With ranks outnumbering the CPUs, the peer we wait
          // for may need ours; otherwise a yield is only a wasted syscall.
          if (oversubscribed_) {
            sched_yield();
          } else {
            for (int i = 0; i < 8; ++i) CpuRelax();
          }
        }
        continue;
      }
      // Someone else is polling (or there is no transport, or another thread
      // completes this request): sleep until a completion or a short while,
      // then try to become the poller.
      absl::MutexLock l(&mu_);
      if (r->done.load(std::memory_order_acquire)) break;
      ++sleepers_;
      cv_.WaitUntil(&mu_, std::min(deadline, MonoNow() + (external ? absl::Milliseconds(100)
                                                                   : absl::Milliseconds(2))));
      --sleepers_;
    }
    // Counted, not timed: a clock read here would sit on every message's
    // critical path.
    waits_ended_.fetch_add(1, std::memory_order_relaxed);
    active_waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }
  // Once done, a request's outcome no longer changes (see Complete).
  if (r->done.load(std::memory_order_acquire)) return r->status;
  absl::MutexLock l(&mu_);
  if (!r->done.load(std::memory_order_acquire)) {
    return TimeoutStatus(*r, MonoNow() - std::min(since, r->started));
  }
  return r->status;
}

bool Engine::Test(Request* r) {
  if (r->done.load(std::memory_order_acquire)) return true;
  if (!transports_.empty() && progress_mu_.TryLock()) {
    PollAll(absl::ZeroDuration());
    progress_mu_.Unlock();
  }
  return r->done.load(std::memory_order_acquire);
}

std::string Engine::PendingReason(const Request& r) {
  std::string heard;
  if (r.peer != kAnySource && r.peer != rank_) {
    int64_t last = peers_[r.peer]->last_rx_ns.load(std::memory_order_relaxed);
    heard = last == 0 ? absl::StrCat("; nothing has arrived from rank ", r.peer, " yet")
                      : absl::StrCat("; last frame from rank ", r.peer, " arrived ",
                                     Seconds(absl::Nanoseconds(CoarseNs() - last)), " ago");
  }
  if (r.kind == Request::Kind::kRecv) {
    if (r.phase == Request::Phase::kMatched) {
      return absl::StrCat("the message (", r.out_bytes, " bytes from rank ", r.out_source,
                          ") was still arriving", heard);
    }
    return absl::StrCat("no matching message arrived", heard);
  }
  if (r.rendezvous && awaiting_cts_.contains(r.id)) {
    return absl::StrCat("rank ", r.peer, " has not posted a matching receive", heard);
  }
  return absl::StrCat("the connection to rank ", r.peer,
                      " did not take the data (rank ", r.peer, " is not reading)", heard);
}

absl::Status Engine::TimeoutStatus(const Request& r, absl::Duration waited) {
  return Timeout(absl::StrCat("rank ", rank_, ": ", Describe(r), " ", TimedOutOrInterrupted(),
                              " after ", Seconds(waited), ": ", PendingReason(r)));
}

absl::Status Engine::WaitWithReport(Request* r, MonoTime end, const HangReporter* reporter,
                                    std::string* report) {
  if (reporter != nullptr) {
    absl::Status s = Wait(r, end - ReportReserve(end - r->started));
    if (CodeOf(s) != ErrorCode::kTimeout || r->done.load() || Interrupted()) return s;
    *report = (*reporter)(end);
  }
  return Wait(r, end);
}

}  // namespace hcomm
