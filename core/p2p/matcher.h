// The matching engine for point-to-point messages: posted receives and
// unexpected arrivals, with MPI's rules.
//
// - An arrival (source, tag) matches the first posted receive, in posting
//   order, whose source and tag equal it or are wildcards.
// - A new receive matches the first unexpected arrival, in arrival order,
//   that it accepts; otherwise it is queued.
// Together these give non-overtaking order per (source, tag).
//
// Not thread-safe: the communicator calls it under its mutex.
#ifndef HCOMM_CORE_P2P_MATCHER_H_
#define HCOMM_CORE_P2P_MATCHER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>

#include "core/p2p/flow.h"
#include "core/p2p/payload_pool.h"
#include "core/p2p/request.h"

namespace hcomm {

// A message that arrived before its receive was posted.
struct Unexpected {
  enum class Kind {
    kEager,  // payload staged in `data` (complete once `complete`)
    kRts,    // a request-to-send: the payload waits at the sender
    kSelf,   // a send to ourselves: the payload is the sender's buffer
  };
  Kind kind = Kind::kEager;
  int source = 0;
  int tag = 0;
  uint64_t bytes = 0;
  PayloadPool::Buffer data;      // kEager
  bool complete = false;         // kEager: payload fully arrived
  uint64_t send_id = 0;          // kRts: the sender's request id
  uint64_t fingerprint = 0;      // the sender's collective fingerprint
  std::shared_ptr<Request> sender;   // kSelf
  std::shared_ptr<Request> claimed;  // kEager: a receive waiting for the payload
  // What the entry holds against its sender's flow window (FlowControl):
  // an eager message's cost, or an RTS. Released when it is erased.
  int64_t held = 0;
  bool held_rts = false;
};

class Matcher {
 public:
  using UnexpectedList = std::list<Unexpected>;

  // `flow` (if not null) gets back what an erased entry held.
  explicit Matcher(FlowControl* flow = nullptr) : flow_(flow) {}
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  static bool Accepts(int want_source, int want_tag, int source, int tag) {
    return (want_source == kAnySource || want_source == source) &&
           (want_tag == kAnyTag || want_tag == tag);
  }

  // Removes and returns the first posted receive that accepts (source, tag),
  // or null.
  std::shared_ptr<Request> TakePosted(int source, int tag);

  // Finds the first unexpected arrival that `want_source`/`want_tag` accept.
  // Returns unexpected().end() when there is none.
  UnexpectedList::iterator FindUnexpected(int want_source, int want_tag);

  void Post(std::shared_ptr<Request> r) { posted_.push_back(std::move(r)); }
  // Removes a posted receive; false if it is not (any longer) posted.
  bool RemovePosted(const Request* r);

  // Appends an arrival; the returned pointer stays valid until it is erased.
  Unexpected* AddUnexpected(Unexpected u);
  // Erases an entry (releasing what it held); returns the next.
  UnexpectedList::iterator EraseUnexpected(UnexpectedList::iterator it);
  // Erases the entry whose address is `u`.
  void EraseUnexpected(const Unexpected* u);

  std::deque<std::shared_ptr<Request>>& posted() { return posted_; }
  // (Erase entries only through EraseUnexpected.)
  UnexpectedList& unexpected() { return unexpected_; }

  // How many arrivals were ever queued. Readable without the communicator's
  // mutex: a receiver that looked at the queue and then takes a frame
  // straight off a connection checks that nothing from that connection was
  // queued in between (which would have to come first).
  uint64_t arrivals() const { return arrivals_.load(std::memory_order_relaxed); }

 private:
  // A deque: posting a receive costs no allocation once it has grown.
  std::deque<std::shared_ptr<Request>> posted_;
  UnexpectedList unexpected_;
  std::atomic<uint64_t> arrivals_{0};
  FlowControl* const flow_;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_MATCHER_H_
