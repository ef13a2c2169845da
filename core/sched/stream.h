// Streams and events: ordered queues of work that a thread of the library
// runs in the background, and marks in them that other streams and callers
// can wait for (API.md, "Streams, priorities and fusion").
//
//   Stream s({.name = "grads", .priority = 1, .timeout = absl::Seconds(30)});
//   s.Enqueue("allreduce #0 (4096 bytes)", [&] { return comm.AllReduce(...); });
//   Event e;
//   e.Record(s);
//   other.WaitEvent(e);                 // other's later work waits for that mark
//   HCOMM_RETURN_IF_ERROR(s.Synchronize(absl::Seconds(30)));
//
// Work of one stream runs in enqueue order, one item after another, on the
// stream's thread, or on a thread that waits for the stream while that one
// is not running an item yet (so a lone operation and its wait cost no hand
// over between threads). Waits
// on a stream end when it has gone `stall` without finishing an item (each
// item bounds itself, e.g. by its communicator's timeout), so a long queue
// is waited out and a stuck one is named. The
// first failure sticks: the stream's later work is not run and counts as
// failed with the same status, until Synchronize returns that status and
// clears it. What an item runs (a collective on the stream's own matching
// context, a host callback) is its owner's business: this layer knows no
// communicator (DESIGN.md, Layers: core/comm -> core/sched).
//
// THREAD SAFETY: every method may be called from any thread; the
// destructor from none other. Items enqueued from several threads at once
// run in the order the stream took them.
#ifndef HCOMM_CORE_SCHED_STREAM_H_
#define HCOMM_CORE_SCHED_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace hcomm {

class Stream;

// A mark in a stream's queue. Recording it again moves the mark; waiting
// waits for the latest mark recorded before the wait began. An event never
// recorded is reached from the start.
class Event {
 public:
  Event();

  // Marks the point after everything queued on `s` so far. Returns at once.
  void Record(Stream& s);
  // Blocks until the latest mark is reached, or returns Timeout naming the
  // stream and what it runs once that stream went `stall` without
  // finishing an item. Once reached, returns the stream's failure if work
  // before the mark failed (CUDA's sticky errors; the stream keeps it for
  // its own Synchronize).
  absl::Status Synchronize(absl::Duration stall) const;
  // Whether the latest mark has been reached. Does not block.
  bool Query() const;

 private:
  friend class Stream;
  struct State {
    absl::Mutex mu;
    uint64_t recorded ABSL_GUARDED_BY(mu) = 0;  // marks recorded so far
    uint64_t reached ABSL_GUARDED_BY(mu) = 0;   // the latest mark reached
    std::atomic<uint64_t> reached_now{0};        // the same, for a spinning waiter
    CondVar changed;                             // signalled when reached moves
    // The stream's failure when the latest reached mark ran, if it had one.
    absl::Status failed ABSL_GUARDED_BY(mu);
    // The stream of the latest mark; alive while that mark is not reached
    // (a stream runs its queue out before it goes).
    Stream* stream ABSL_GUARDED_BY(mu) = nullptr;
  };
  // Waits until mark `mark` is reached; Timeout after a stall says who waits.
  static absl::Status WaitFor(State& state, uint64_t mark, absl::Duration stall,
                              const std::string& waiter);
  std::shared_ptr<State> state_;
};

class Stream {
 public:
  struct Options {
    std::string name = "stream";  // for messages: "stream 'grads' ..."
    // A higher number is served first where streams compete (read by the
    // layers that share the wire among streams).
    int priority = 0;
    // How long the stream's own waits (on another stream's event) may see
    // that stream finish nothing.
    absl::Duration timeout = absl::Seconds(60);
    // The nice value of the stream's thread (0: the program's; 1-19: a
    // lower scheduling priority). Where the program's own threads fill the
    // CPUs, a wake of a thread at nice 0 preempts the thread that queued
    // the work (which runs a lone operation itself when it waits, see
    // Synchronize), and competes with the program's computation. Measured:
    // docs/performance.md, "A stream's thread on busy CPUs".
    int nice = 0;
  };
  using Work = absl::AnyInvocable<absl::Status()>;
  using Skipped = absl::AnyInvocable<void()>;

  explicit Stream(Options options);
  // Runs what is queued, then stops the stream's thread.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues `work`, named `what` in messages; returns at once. `work` runs on
  // the stream's thread after everything queued before it, unless the
  // stream has failed since the last Synchronize: then `skipped` runs in
  // its place, if given (e.g. to tell the peers that a collective will not
  // come). Returns the item's place in the stream (1 for the first item;
  // event marks and waits take places too).
  uint64_t Enqueue(std::string what, Work work, Skipped skipped = nullptr);
  // The stream's later work waits until `event`'s latest mark (recorded
  // before this call) is reached. Returns at once.
  void WaitEvent(const Event& event);
  // Blocks until everything queued before the call has run or been skipped.
  // Returns the first failure of that work (its message naming the stream
  // and the item) and clears it; Timeout once the stream went `stall`
  // without finishing an item, naming what is still queued and what runs
  // (the work goes on).
  absl::Status Synchronize(absl::Duration stall);
  // Whether everything queued so far has run. Does not block.
  bool Idle() const;
  // How many items have run or been skipped so far.
  uint64_t Finished() const;

  // Whether every item queued between places `after` and `before`
  // (exclusive) is an event's mark, which work may run ahead of without
  // changing what the mark says (core/comm/comm_stream.h fuses across
  // them). False if any of them has started to run.
  bool OnlyMarksBetween(uint64_t after, uint64_t before) const;

  const std::string& name() const { return options_.name; }
  int priority() const { return options_.priority; }
  // "stream 'grads' (priority 1): running allreduce #3 for 0.20 s, 2 more queued"
  std::string Describe() const;

 private:
  friend class Event;  // Record queues its mark with Push
  struct Item {
    uint64_t seq;
    std::string what;
    Work work;
    Skipped skipped;
    bool control;  // event marks and waits: run even after a failure
    bool mark;     // an event's mark (Event::Record)
  };

  uint64_t Push(std::string what, Work work, Skipped skipped, bool control, bool mark = false);
  // The failure that makes the stream skip its work now (OK if none).
  absl::Status Failure() const;
  void Run();
  // Runs the front item on the calling thread, unless the queue is empty or
  // another thread runs an item: then false. Items run one at a time, in
  // order, on whichever thread takes them (the stream's own, or one that
  // waits for the stream in Synchronize or on an event).
  bool RunFront();
  // Whether RunFront would run an item now.
  bool CanRunHere() const;
  // A waiter starts (+1) or stops (-1) running the stream's items itself;
  // while any does, the stream's own thread takes none.
  void Drive(int delta);
  std::string DescribeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // items ever queued
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;      // items ever run or skipped
  absl::Status error_ ABSL_GUARDED_BY(mu_);     // the first failure not yet returned
  uint64_t error_seq_ ABSL_GUARDED_BY(mu_) = 0;  // the item that failed (1-based)
  std::string running_ ABSL_GUARDED_BY(mu_);    // empty while idle
  MonoTime running_since_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool active_ ABSL_GUARDED_BY(mu_) = false;  // a thread runs an item
  // Signalled when an item is queued or finishes (Synchronize's waiters).
  CondVar changed_;
  int drivers_ ABSL_GUARDED_BY(mu_) = 0;      // waiters running items (Drive)
  std::thread worker_;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_SCHED_STREAM_H_
