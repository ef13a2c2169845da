// Shrink: after a member's failure, the survivors agree on who is gone and
// make a communicator of the living members (API.md, "Configuration and
// communicators"; docs/reliability.md, "Shrink").
//
// The agreement is flooding consensus over a perfect failure detector (a
// broken connection: Engine::PeerHealth, or a receive failing with
// PEER_FAILURE), as ULFM's agree. In round r every survivor sends its view
// (the members it knows failed, and the largest free context id it has
// heard of) to every member it believes alive, and receives theirs:
//   - it DECIDES on its view when, in that round, every member it waited
//     for sent a view equal to its own and none failed; it then sends the
//     decision to them under round r + 1's tag;
//   - it ADOPTS a decision that comes instead of a view, and passes it on
//     under the next round's tag (its sender may have died before telling
//     everyone);
//   - else it merges what it learned and goes on to round r + 1.
// Two survivors deciding in the same round hold equal views (each received
// the other's); one that does not decide in round r, while another did,
// waits in round r + 1 for that one's message, which is the decision. So
// every survivor ends with the same view, except where its sender died
// after deciding and before anyone heard of it (then nobody adopted it).
// A member that dies after its view was counted is a member of the new
// communicator, whose collectives then fail with PEER_FAILURE on every
// survivor (Engine::WatchMembers): they shrink it in turn.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/comm/collective_peers.h"
#include "core/comm/communicator.h"

namespace hcomm {

namespace {

constexpr uint32_t kViewMagic = 0x4b524853;  // "SHRK"
constexpr uint32_t kView = 1;
constexpr uint32_t kDecided = 2;
// Tags: the shrink call's number (its epoch) and the round.
constexpr int kRoundBits = 16;
constexpr int kMaxRounds = (1 << kRoundBits) - 1;

int ShrinkTag(int epoch, int round) {
  return ((epoch & 0x3fff) << kRoundBits) | (round & kMaxRounds);
}

}  // namespace

// What travels: a header, then one byte per member (1: failed).
struct Communicator::ShrinkView {
  struct Header {
    uint32_t magic;
    uint32_t kind;
    uint32_t round;
    uint32_t ctx;
  };
  uint32_t ctx = 0;
  std::vector<uint8_t> dead;

  std::vector<char> Encode(uint32_t kind, int round) const {
    std::vector<char> out(sizeof(Header) + dead.size());
    Header h{kViewMagic, kind, static_cast<uint32_t>(round), ctx};
    memcpy(out.data(), &h, sizeof h);
    if (!dead.empty()) memcpy(out.data() + sizeof h, dead.data(), dead.size());
    return out;
  }
  // False for a message that is not a view of `n` members.
  bool Decode(const std::vector<char>& in, size_t got, size_t n, uint32_t* kind) {
    if (got != sizeof(Header) + n) return false;
    Header h;
    memcpy(&h, in.data(), sizeof h);
    if (h.magic != kViewMagic || (h.kind != kView && h.kind != kDecided)) return false;
    *kind = h.kind;
    ctx = h.ctx;
    dead.assign(in.begin() + sizeof h, in.begin() + sizeof h + n);
    for (uint8_t& d : dead) d = d != 0;
    return true;
  }
  bool operator==(const ShrinkView& o) const { return ctx == o.ctx && dead == o.dead; }
  void Merge(const ShrinkView& o) {
    ctx = std::max(ctx, o.ctx);
    for (size_t i = 0; i < dead.size(); ++i) dead[i] |= o.dead[i];
  }
};

absl::Status Communicator::AgreeOnFailures(int epoch, MonoTime deadline,
                                           std::vector<uint8_t>* dead, uint32_t* ctx) {
  const uint32_t shrink_ctx = kShrinkContextBit | coll_ctx_;
  const size_t msg_bytes = sizeof(ShrinkView::Header) + size_;
  auto ranks_named = [this](const std::vector<int>& ranks) {
    std::vector<std::string> names;
    for (int g : ranks) names.push_back(absl::StrCat(g, " (world ", group_to_world_[g], ")"));
    return absl::StrJoin(names, ", ");
  };
  auto failed_list = [](const std::vector<uint8_t>& d) {
    std::vector<int> out;
    for (size_t g = 0; g < d.size(); ++g) {
      if (d[g]) out.push_back(static_cast<int>(g));
    }
    return out;
  };
  const std::string who = absl::StrCat("shrink on rank ", rank_, " (world rank ",
                                       group_to_world_[rank_], ", communicator of ", size_, ")");

  ShrinkView mine;
  mine.ctx = engine_->NextFreeContext();
  mine.dead.assign(size_, 0);
  for (int g = 0; g < size_; ++g) {
    if (g != rank_ && !engine_->PeerHealth(group_to_world_[g]).ok()) mine.dead[g] = 1;
  }

  // Sends `msg` to member g under `tag`; nothing waits for it (the
  // message is small and leaves at once; one to a member that failed
  // meanwhile just fails). The request keeps the bytes until it ends.
  auto post = [&](const std::shared_ptr<std::vector<char>>& msg, int g, int tag) {
    auto s = engine_->Isend(shrink_ctx, msg->data(), msg->size(), 1, group_to_world_[g], tag);
    if (!s.ok()) return;
    (*s)->keep = msg;
    engine_->Release(*s);
  };
  // Sends `view` as `kind` under round `round`'s tag to the members it
  // believes alive, but `skip`.
  auto tell = [&](const ShrinkView& view, uint32_t kind, int round, int skip) {
    auto msg = std::make_shared<std::vector<char>>(view.Encode(kind, round));
    for (int g = 0; g < size_; ++g) {
      if (g == rank_ || g == skip || view.dead[g]) continue;
      post(msg, g, ShrinkTag(epoch, round));
    }
  };

  for (int round = 0; round <= kMaxRounds; ++round) {
    const int tag = ShrinkTag(epoch, round);
    auto msg = std::make_shared<std::vector<char>>(mine.Encode(kView, round));
    ShrinkView next = mine;
    bool changed = false;  // a member failed this round
    bool same = true;      // every view received equals ours
    bool adopted = false;  // a decision came instead of a view
    // A receive's buffer lives as long as its request (`keep`): one
    // withdrawn while its message lands is left to finish.
    struct Pending {
      int g;
      std::shared_ptr<std::vector<char>> buf;
      std::shared_ptr<Request> r;
    };
    std::vector<Pending> recvs;
    for (int g = 0; g < size_; ++g) {
      if (g == rank_ || mine.dead[g]) continue;
      const int w = group_to_world_[g];
      Pending p{g, std::make_shared<std::vector<char>>(msg_bytes), nullptr};
      auto r = engine_->Irecv(shrink_ctx, p.buf->data(), p.buf->size(), 1, w, tag);
      if (!r.ok()) {
        if (CodeOf(r.status()) != ErrorCode::kPeerFailure) return Annotate(r.status(), who);
        next.dead[g] = 1;
        changed = true;
        continue;
      }
      p.r = std::move(r).value();
      p.r->keep = p.buf;
      recvs.push_back(std::move(p));
      // (A send that fails now fails for the peer's failure, which the
      // receive from it reports.)
      post(msg, g, tag);
    }
    // Ends what is still pending of this round (after an error or a
    // decision): nothing more is read here.
    auto withdraw_rest = [&](const absl::Status& why) {
      for (Pending& p : recvs) {
        if (p.r != nullptr && !p.r->done.load(std::memory_order_acquire)) {
          engine_->Withdraw(p.r, why).IgnoreError();
        }
      }
    };
    for (Pending& p : recvs) {
      absl::Status s = engine_->Wait(p.r.get(), deadline);
      if (CodeOf(s) == ErrorCode::kTimeout) {
        std::vector<int> waiting;
        for (Pending& q : recvs) {
          if (!q.r->done.load(std::memory_order_acquire)) waiting.push_back(q.g);
        }
        const std::vector<int> known = failed_list(next.dead);
        absl::Status t = Timeout(absl::StrCat(
            who, ": round ", round, " of the agreement on failed ranks timed out (timeout ",
            Seconds(timeout()), "); no view yet from rank", waiting.size() == 1 ? " " : "s ",
            ranks_named(waiting), "; known failed: ",
            known.empty() ? std::string("none") : ranks_named(known),
            ". Every surviving rank must call shrink"));
        withdraw_rest(t);
        return t;
      }
      if (!s.ok()) {
        if (CodeOf(s) != ErrorCode::kPeerFailure) {
          withdraw_rest(s);
          return Annotate(s, who);
        }
        next.dead[p.g] = 1;
        changed = true;
        continue;
      }
      ShrinkView theirs;
      uint32_t kind = 0;
      if (!theirs.Decode(*p.buf, p.r->out_bytes, size_, &kind)) {
        absl::Status bad = Internal(absl::StrCat(
            who, ": rank ", p.g, " sent ", p.r->out_bytes,
            " bytes that are not a shrink view of this communicator (", msg_bytes, " bytes)"));
        withdraw_rest(bad);
        return bad;
      }
      if (kind == kDecided) {
        withdraw_rest(Aborted(absl::StrCat(who, ": decided")));
        tell(theirs, kDecided, round + 1, p.g);
        mine = std::move(theirs);
        adopted = true;
        break;
      }
      if (!(theirs == mine)) same = false;
      next.Merge(theirs);
    }
    if (!adopted && !changed && same) tell(mine, kDecided, round + 1, -1);
    if (adopted || (!changed && same)) {
      if (mine.dead[rank_]) {
        return PeerFailure(absl::StrCat(who, ": the survivors agreed that this rank failed"));
      }
      *dead = mine.dead;
      *ctx = mine.ctx;
      return absl::OkStatus();
    }
    mine = std::move(next);
    if (mine.dead[rank_]) {
      return PeerFailure(
          absl::StrCat(who, ": another survivor counts this rank among the failed (its "
                            "connection to this rank broke)"));
    }
  }
  return Internal(absl::StrCat(who, ": no agreement after ", kMaxRounds, " rounds"));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Shrink() {
  HCOMM_RETURN_IF_ERROR(engine_->Usable());
  const int epoch = shrinks_.fetch_add(1);
  std::vector<uint8_t> dead;
  uint32_t ctx = 0;
  HCOMM_RETURN_IF_ERROR(AgreeOnFailures(epoch, Deadline(), &dead, &ctx));
  engine_->ReserveContexts(ctx, 2);
  std::vector<int> members_world;
  for (int g = 0; g < size_; ++g) {
    if (!dead[g]) members_world.push_back(group_to_world_[g]);
  }
  // A member that died after the survivors agreed stays a member: making
  // the communicator then fails on some survivors and not on others (those
  // that heard from it before it died), so every survivor returns it
  // alike, its collectives failing with PEER_FAILURE everywhere, and the
  // survivors shrink it in turn.
  absl::Status setup_failure;
  absl::StatusOr<std::unique_ptr<Communicator>> child =
      MakeChild(std::move(members_world), ctx, &setup_failure);
  if (!child.ok()) return Annotate(child.status(), absl::StrCat("shrink on rank ", rank_));
  if (!setup_failure.ok() && debug_info_) {
    fprintf(stderr, "hcomm INFO: shrink on rank %d: a member of the new communicator failed "
            "while it was made; shrink it again: %s\n", rank_,
            std::string(setup_failure.message()).c_str());
  }
  return child;
}

}  // namespace hcomm
