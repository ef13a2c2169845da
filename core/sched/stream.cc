#include "core/sched/stream.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/priority.h"
#include "core/base/spin.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

// How long a waiter spins before it sleeps (see Event::WaitFor).
constexpr absl::Duration kSpinBeforeSleep = absl::Microseconds(30);

// Waits on `mu` (held) until `cond` holds: true. `changed` is signalled
// whenever what `cond` reads changes. False once `progress()` (read under
// `mu`) has not changed for `stall`, or once the calling thread's call was
// interrupted (core/base/interrupt.h; then the wait looks every
// kInterruptCheckPeriod).
bool AwaitProgress(absl::Mutex& mu, CondVar& changed, absl::FunctionRef<bool()> cond,
                   absl::Duration stall, absl::FunctionRef<uint64_t()> progress)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const absl::Duration slice =
      InterruptCheckSet() ? std::min(stall, kInterruptCheckPeriod) : stall;
  uint64_t seen = progress();
  MonoTime since = MonoNow();
  while (!cond()) {
    changed.WaitFor(&mu, slice);
    if (cond()) break;
    const MonoTime now = MonoNow();
    if (InterruptNow(now)) return false;
    const uint64_t p = progress();
    if (p != seen) {
      seen = p;
      since = now;
    } else if (now - since >= stall) {
      return false;
    }
  }
  return true;
}

}  // namespace

Event::Event() : state_(std::make_shared<State>()) {}

void Event::Record(Stream& s) {
  uint64_t mark;
  {
    absl::MutexLock l(&state_->mu);
    mark = ++state_->recorded;
    state_->stream = &s;
  }
  std::shared_ptr<State> state = state_;
  Stream* stream = &s;  // runs the item, so outlives it
  s.Push(absl::StrCat("record event (mark ", mark, ")"),
         [state, mark, stream] {
           absl::Status failure = stream->Failure();
           absl::MutexLock l(&state->mu);
           if (state->reached < mark) {
             state->reached = mark;
             state->reached_now.store(mark, std::memory_order_release);
             state->failed = std::move(failure);
             state->changed.SignalAll();
           }
           return absl::OkStatus();
         },
         nullptr, /*control=*/true, /*mark=*/true);
}

absl::Status Event::WaitFor(State& state, uint64_t mark, absl::Duration stall,
                            const std::string& waiter) {
  absl::MutexLock l(&state.mu);
  auto reached = [&state, mark]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
    return state.reached >= mark;
  };
  // The stream of the latest mark is alive while we hold state.mu and the
  // mark is not reached: that mark is not reached either, and a stream
  // runs its queue out before it is destroyed. (Lock order: an event's mu,
  // then a stream's mu_.)
  // As Stream::Synchronize, the waiter runs the stream's front item while
  // no thread does (with the event's lock released: the item may take
  // others).
  // (A condition may not take another lock, so the wait itself watches the
  // mark alone: the stream's thread, woken by the enqueue, runs what comes
  // up meanwhile.)
  //
  // While it does, the waiter "drives" the stream: the stream's own thread
  // stands back (a thread just woken would otherwise take the next item
  // from under a waiter that is there anyway, and run it where its waits
  // sleep). Then a short spin before sleeping: the mark of a small
  // operation comes within microseconds, and waking a sleeping thread (on
  // a VM, an idle CPU) can take tens. A sleeping waiter drives nothing.
  if (reached()) return absl::OkStatus();
  // Registered while the mark is not reached, so the stream is alive; it
  // stays so until the driver leaves (the stream waits for its drivers
  // before it goes).
  Stream* stream = state.stream;
  stream->Drive(+1);
  state.mu.Unlock();
  const int64_t spin_until = MonoNs() + absl::ToInt64Nanoseconds(kSpinBeforeSleep);
  for (int i = 0; state.reached_now.load(std::memory_order_acquire) < mark; ++i) {
    if (stream->RunFront()) continue;
    if (MonoNs() >= spin_until) break;
    for (int k = 0; k < 16; ++k) CpuRelax();
  }
  stream->Drive(-1);
  state.mu.Lock();
  if (reached()) return absl::OkStatus();
  if (AwaitProgress(state.mu, state.changed, reached, stall,
                    [stream] { return stream->Finished(); })) {
    return absl::OkStatus();
  }
  return Timeout(absl::StrCat(waiter, " ", TimedOutOrInterrupted(),
                              " waiting for an event (mark ", mark, "); its latest mark is on ",
                              state.stream->Describe()));
}

absl::Status Event::Synchronize(absl::Duration stall) const {
  uint64_t mark;
  {
    absl::MutexLock l(&state_->mu);
    mark = state_->recorded;
  }
  HCOMM_RETURN_IF_ERROR(WaitFor(*state_, mark, stall, "event synchronize"));
  absl::MutexLock l(&state_->mu);
  if (state_->failed.ok()) return absl::OkStatus();
  return Annotate(state_->failed, "event synchronize: work before the mark failed");
}

bool Event::Query() const {
  absl::MutexLock l(&state_->mu);
  return state_->reached >= state_->recorded;
}

Stream::Stream(Options options) : options_(std::move(options)) {
  worker_ = std::thread([this] { Run(); });
}

Stream::~Stream() {
  {
    absl::MutexLock l(&mu_);
    closing_ = true;
  }
  worker_.join();
}

uint64_t Stream::Enqueue(std::string what, Work work, Skipped skipped) {
  return Push(std::move(what), std::move(work), std::move(skipped), /*control=*/false);
}

void Stream::WaitEvent(const Event& event) {
  std::shared_ptr<Event::State> state = event.state_;
  uint64_t mark;
  {
    absl::MutexLock l(&state->mu);
    mark = state->recorded;
  }
  if (mark == 0) return;  // never recorded: nothing to wait for
  std::string waiter = absl::StrCat("stream '", options_.name, "'");
  const absl::Duration timeout = options_.timeout;
  Push(absl::StrCat("wait for an event's mark ", mark),
       [state, mark, waiter, timeout] {
         return Event::WaitFor(*state, mark, timeout, waiter);
       },
       nullptr, /*control=*/true);
}

uint64_t Stream::Push(std::string what, Work work, Skipped skipped, bool control, bool mark) {
  absl::MutexLock l(&mu_);
  queue_.push_back(
      Item{++enqueued_, std::move(what), std::move(work), std::move(skipped), control, mark});
  changed_.SignalAll();
  return enqueued_;
}

bool Stream::OnlyMarksBetween(uint64_t after, uint64_t before) const {
  if (before <= after + 1) return true;
  absl::MutexLock l(&mu_);
  // The queue holds consecutive places, from its front's on.
  if (queue_.empty() || after + 1 < queue_.front().seq) return false;  // one has started
  const uint64_t first = queue_.front().seq;
  for (uint64_t place = after + 1; place < before; ++place) {
    const size_t i = place - first;
    if (i >= queue_.size() || !queue_[i].mark) return false;
  }
  return true;
}

absl::Status Stream::Failure() const {
  absl::MutexLock l(&mu_);
  return error_;
}

void Stream::Run() {
  MarkBackgroundThread();  // its waits leave the CPUs to the program's computation
  if (options_.nice > 0) {
    // Linux's nice is per thread (setpriority with a thread id). A refusal
    // (a seccomp filter, say) leaves the thread as it was: slower, not wrong.
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options_.nice);
  }
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (!queue_.empty() && !active_ && drivers_ == 0) ||
               (closing_ && queue_.empty() && !active_ && drivers_ == 0);
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // closing, and all run
    }
    RunFront();
  }
}

bool Stream::RunFront() {
  Item item;
  bool skip;
  {
    absl::MutexLock l(&mu_);
    if (queue_.empty() || active_) return false;
    item = std::move(queue_.front());
    queue_.pop_front();
    active_ = true;
    running_ = item.what;
    running_since_ = MonoNow();
    skip = !error_.ok() && !item.control;
  }
  absl::Status status;
  if (!skip) {
    status = item.work();
  } else if (item.skipped) {
    item.skipped();
  }
  item.work = nullptr;  // what they hold goes now, not with the next item
  item.skipped = nullptr;
  absl::MutexLock l(&mu_);
  if (!status.ok() && error_.ok()) {
    error_ = Annotate(status, absl::StrCat("stream '", options_.name, "', ", item.what));
    error_seq_ = item.seq;
  }
  ++done_;
  running_.clear();
  active_ = false;
  changed_.SignalAll();
  return true;
}

void Stream::Drive(int delta) {
  absl::MutexLock l(&mu_);
  drivers_ += delta;
}

bool Stream::CanRunHere() const {
  absl::MutexLock l(&mu_);
  return !queue_.empty() && !active_;
}

absl::Status Stream::Synchronize(absl::Duration stall) {
  absl::MutexLock l(&mu_);
  const uint64_t target = enqueued_;
  // The caller runs the front item itself while no thread does (the
  // stream's own is still waking up): a lone operation then costs no hand
  // over to the stream's thread and back.
  auto done_or_idle = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ >= target || (!queue_.empty() && !active_);
  };
  while (done_ < target) {
    if (!queue_.empty() && !active_) {
      ++drivers_;  // the stream's thread stands back meanwhile (see Event::WaitFor)
      mu_.Unlock();
      RunFront();
      mu_.Lock();
      --drivers_;
      continue;
    }
    if (!AwaitProgress(mu_, changed_, done_or_idle, stall,
                       [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return done_; })) {
      if (Interrupted()) {
        return Timeout(absl::StrCat("stream synchronize ", TimedOutOrInterrupted(), ": ",
                                    DescribeLocked()));
      }
      return Timeout(absl::StrCat("stream synchronize timed out (nothing finished for ",
                                  Seconds(stall), "): ", DescribeLocked()));
    }
  }
  if (error_.ok() || error_seq_ > target) return absl::OkStatus();  // a later item's failure
  absl::Status out = error_;
  // Work queued after `target` and already skipped failed with this status
  // too: the next Synchronize says so again.
  if (done_ == target) error_ = absl::OkStatus();
  return out;
}

uint64_t Stream::Finished() const {
  absl::MutexLock l(&mu_);
  return done_;
}

bool Stream::Idle() const {
  absl::MutexLock l(&mu_);
  return done_ == enqueued_;
}

std::string Stream::Describe() const {
  absl::MutexLock l(&mu_);
  return DescribeLocked();
}

std::string Stream::DescribeLocked() const {
  std::string out = absl::StrCat("stream '", options_.name, "' (priority ", options_.priority, ")");
  if (running_.empty()) {
    absl::StrAppend(&out, ": idle");
  } else {
    absl::StrAppend(&out, ": running ", running_, " for ", Seconds(MonoNow() - running_since_));
  }
  if (!queue_.empty()) absl::StrAppend(&out, ", ", queue_.size(), " more queued");
  if (!error_.ok()) absl::StrAppend(&out, "; failed: ", error_.message());
  return out;
}

}  // namespace hcomm
