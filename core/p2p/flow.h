// Flow control of eager messages: what a peer sends before its receive is
// posted is held here, and nothing a peer sends can make this rank hold
// more than a bounded amount of it (docs/reliability.md, "Flow control").
//
//   FlowControl flow(size, rank, windows);      // windows[p]: what p holds of ours
//   if (flow.TakeCredit(peer, bytes)) { /* send eagerly */ } else { /* RTS */ }
//   ...
//   if (!flow.Hold(peer, cost)) { /* peer broke the protocol: fail it */ }
//   flow.Unhold(peer, cost);                     // the receive took it
//   for (auto [peer, amount] : flow.TakeDue()) { /* send CREDIT(amount) */ }
//
// Each eager message costs its payload plus kEntryBytes (the entry that
// holds it) against a window of its receiver's `unexpected_bytes`. A sender
// spends credit as it sends and gets it back in CREDIT frames once the
// receiver has taken the messages (a quarter of the window at a time, so a
// credit frame follows thousands of small messages, not each); a sender
// without credit sends by rendezvous (RTS/CTS), which the receiver holds as
// an entry without payload. Unanswered RTS are bounded too: a sender keeps
// at most window / kEntryBytes of them outstanding per receiver, which
// holds twice that before it calls the sender a flood.
//
// THREAD SAFETY: TakeCredit, ReturnCredit and TakeDue may run on any
// thread; Hold, Unhold, HoldRts and UnholdRts need external serialisation
// (the engine's mutex), and Consumed for one peer serialisation of that
// peer's frames (the transport's receive lock for it).
#ifndef HCOMM_CORE_P2P_FLOW_H_
#define HCOMM_CORE_P2P_FLOW_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace hcomm {

class FlowControl {
 public:
  // What an entry of the unexpected queue costs beyond its payload.
  static constexpr int64_t kEntryBytes = 128;
  // An eager message's cost against the window.
  static int64_t Cost(uint64_t bytes) { return static_cast<int64_t>(bytes) + kEntryBytes; }

  // `windows[p]`: the unexpected_bytes rank p published (what it holds of
  // this rank's messages); `own_window`: this rank's, which it enforces.
  FlowControl(int size, int rank, const std::vector<int64_t>& windows, int64_t own_window);

  // --- Sender side ---------------------------------------------------------
  // Spends the credit of an eager message of `bytes` to `peer`; false (and
  // nothing spent) where there is not enough.
  bool TakeCredit(int peer, uint64_t bytes);
  // A CREDIT frame of `amount` from `peer`. False: more than this rank has
  // spent came back (a protocol violation); nothing is added.
  bool ReturnCredit(int peer, int64_t amount);
  // The most RTS this rank keeps unanswered towards `peer`.
  int64_t MaxRts(int peer) const { return windows_[peer] / kEntryBytes; }

  // --- Receiver side -------------------------------------------------------
  // An eager message of `cost` from `peer` goes to the unexpected queue.
  // False where that would hold more than this rank's window from `peer`:
  // the peer does not follow the protocol (nothing is held).
  bool Hold(int peer, int64_t cost);
  // A held message was taken by a receive or dropped: its cost is freed.
  void Unhold(int peer, int64_t cost);
  // An eager message of `cost` from `peer` went straight to its receive (or
  // was dropped on arrival). Only with `peer`'s frames serialised (the
  // transport's receive lock for it): a plain count, moved to the shared
  // one a quarter window at a time.
  void Consumed(int peer, int64_t cost) {
    if ((arrived_[peer] += cost) >= return_at_) Free(peer, std::exchange(arrived_[peer], 0));
  }
  // An RTS from `peer` waits for its receive; false where `peer` already
  // has twice its bound waiting (nothing is held).
  bool HoldRts(int peer);
  void UnholdRts(int peer);
  // Whether a credit frame is due to some peer (cheap).
  bool CreditDue() const { return due_.load(std::memory_order_acquire); }
  // The credit due to each peer now, (peer, amount), zeroed here.
  std::vector<std::pair<int, int64_t>> TakeDue();

  // What `peer`'s messages hold here now (tests, reports).
  int64_t held(int peer) const { return held_[peer]; }
  int64_t window() const { return own_window_; }

 private:
  const int size_;
  const int rank_;
  const std::vector<int64_t> windows_;  // by peer: its window for us
  const int64_t own_window_;
  const int64_t return_at_;  // credit goes back once this much is freed
  std::unique_ptr<std::atomic<int64_t>[]> credit_;  // by peer: what we may still send
  std::unique_ptr<std::atomic<int64_t>[]> freed_;   // by peer: freed, not yet returned
  // Adds `cost` to what goes back to `peer`, marking a credit due once a
  // quarter window of it is there.
  void Free(int peer, int64_t cost);

  std::vector<int64_t> arrived_;  // by peer, under its receive lock (Consumed)
  std::vector<int64_t> held_;                       // by peer (serialised)
  std::vector<int64_t> held_rts_;                   // by peer (serialised)
  std::atomic<bool> due_{false};
};

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_FLOW_H_
