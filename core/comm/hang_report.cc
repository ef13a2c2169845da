// Hang reports: what every rank waits for and its last operations, read
// off their answers (through the store, or over the connections once rank 0
// is gone), for a timeout's message; and the flight recorder's dumps.
#include "core/comm/communicator.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/time/clock.h"

#include "core/base/clock.h"
#include "core/comm/collective_peers.h"

namespace hcomm {

std::string Communicator::HangReport(uint32_t ctx, int seq, uint64_t fp, MonoTime deadline) {
  std::map<int, std::string> states = engine_->CollectHangReport(deadline);
  auto g = [this](int world) {
    if (world < 0) return std::string("any rank");
    int r = world < static_cast<int>(world_to_group_->size()) ? (*world_to_group_)[world] : -1;
    return r >= 0 ? absl::StrCat("rank ", r) : absl::StrCat("world rank ", world);
  };
  const bool coll = seq >= 0;
  bool disagree = false;  // some rank is in another call under this seq
  std::vector<std::string> lines;
  std::vector<int> absent;  // collective: ranks that never entered it, or did not answer
  for (int r = 0; r < size_; ++r) {
    const int w = group_to_world_[r];
    auto it = states.find(w);
    if (it == states.end()) {
      lines.push_back(absl::StrCat("rank ", r, " did not answer (stuck outside hcomm, or gone)"));
      absent.push_back(r);
      continue;
    }
    int64_t cseq = -1, in_progress = 0;
    uint64_t cfp = 0;
    // What the rank waits in, each kind once with how many of it (a large
    // collective has a request pending per chunk).
    std::vector<std::pair<std::string, int>> pending;
    auto wait_in = [&pending](std::string what) {
      for (auto& [w, n] : pending) {
        if (w == what) {
          ++n;
          return;
        }
      }
      pending.push_back({std::move(what), 1});
    };
    for (absl::string_view line : absl::StrSplit(it->second, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      uint32_t lctx = 0;
      if (f.size() < 5 || f[0] == "F" || !absl::SimpleAtoi(f[1], &lctx) || lctx != ctx) continue;
      if (f[0] == "C") {
        (void)absl::SimpleAtoi(f[2], &cseq);
        (void)absl::SimpleAtoi(f[3], &cfp);
        (void)absl::SimpleAtoi(f[4], &in_progress);
        continue;
      }
      int peer = -1, tag = -1;
      (void)absl::SimpleAtoi(f[2], &peer);
      (void)absl::SimpleAtoi(f[3], &tag);
      // A collective's own messages, or those of the check before it.
      const bool check = coll && tag == (kCheckTag | (seq & kCheckTagMask));
      if (coll && tag != seq && !check) continue;
      std::string tagtxt =
          check ? " for the call check (HCOMM_CHECK_COLLECTIVES)"
                : coll ? "" : absl::StrCat(tag < 0 ? " any tag" : absl::StrCat(" tag ", tag));
      if (f[0] == "R") {
        wait_in(absl::StrCat("recv from ", g(peer), tagtxt, " (", f[4], " bytes)"));
      } else if (f[0] == "X") {
        wait_in(absl::StrCat("recv from ", g(peer), tagtxt, " (", f[4], " bytes, arriving)"));
      } else if (f[0] == "M") {
        wait_in(absl::StrCat("the shared-memory ",
                             CollectiveOpName(static_cast<CollectiveOp>((fp >> 56) & 0xf)),
                             " for ", g(peer), " (", f[4], " bytes)"));
      } else if (f[0] == "S") {
        bool w_ = f.size() > 5 && f[5] == "w";
        wait_in(absl::StrCat("send to ", g(peer), tagtxt, " (", f[4], " bytes",
                             w_ ? ", no matching receive yet)" : ", in transfer)"));
      }
    }
    std::vector<std::string> waits;
    for (const auto& [w, n] : pending) {
      waits.push_back(n == 1 ? w : absl::StrCat(n, " x ", w));
    }
    std::string who = absl::StrCat("rank ", r, r == rank_ ? " (this rank)" : "");
    if (cfp == 0) cseq = -1;  // no collective yet (every call's fingerprint is non-zero)
    if (coll) {
      if (cseq < seq) absent.push_back(r);
      if (cseq < seq) {
        lines.push_back(absl::StrCat(who, " never entered ", DescribeFingerprint(fp), " seq ",
                                     seq, cseq >= 0 ? absl::StrCat(" (last: ",
                                                                   DescribeFingerprint(cfp),
                                                                   " seq ", cseq, ")")
                                                    : std::string(" (no collective yet)")));
      } else if (cseq > seq) {
        lines.push_back(absl::StrCat(who, " is past seq ", seq, " (at seq ", cseq, ")"));
      } else if (fp != 0 && cfp != fp) {  // (cfp is not 0 here: cseq would be -1)
        // Over TCP nothing may have carried the other call's fingerprint
        // to a rank that waits (ranks that disagree only on a root).
        disagree = true;
        lines.push_back(absl::StrCat(
            who, " called ", DescribeFingerprint(cfp), " as seq ", seq,
            !in_progress ? std::string(" and finished it")
                         : waits.empty() ? std::string()
                                         : absl::StrCat(" and waits in ",
                                                        absl::StrJoin(waits, ", "))));
      } else if (!in_progress) {
        lines.push_back(absl::StrCat(who, " finished seq ", seq));
      } else if (waits.empty()) {
        lines.push_back(absl::StrCat(who, " is in seq ", seq, " and waits on nothing"));
      } else {
        lines.push_back(absl::StrCat(who, " waits in ", absl::StrJoin(waits, ", ")));
      }
    } else if (!waits.empty()) {
      lines.push_back(absl::StrCat(who, " waits in ", absl::StrJoin(waits, ", ")));
    } else {
      lines.push_back(absl::StrCat(who, " has no pending point-to-point operation"));
    }
  }
  // Every rank's last operations (the flight recorder), newest last: a few
  // in the message, all of them in the dump. The message stays bounded in
  // a large communicator: past kSmall ranks, the others' newest alone, and
  // at most kListed ranks.
  constexpr size_t kShown = 8;
  constexpr int kSmall = 8, kListed = 32;
  const int64_t now = absl::GetCurrentTimeNanos();
  std::map<int, std::vector<FlightRecorder::Entry>> records;  // by world rank
  std::vector<std::string> last_ops;
  for (const auto& [w, st] : states) records[w] = FlightRecorder::Decode(st);
  int unlisted = 0;
  for (int r = 0; r < size_; ++r) {
    auto it = records.find(group_to_world_[r]);
    if (it == records.end()) continue;
    const bool key = r == rank_ || std::find(absent.begin(), absent.end(), r) != absent.end();
    if (!key && static_cast<int>(last_ops.size()) >= kListed) {
      ++unlisted;
      continue;
    }
    const size_t shown = key || size_ <= kSmall ? kShown : 1;
    const std::vector<FlightRecorder::Entry>& all = it->second;
    std::vector<std::string> ops;
    for (size_t i = all.size() > shown ? all.size() - shown : 0; i < all.size(); ++i) {
      ops.push_back(FlightRecorder::Describe(all[i], now));
    }
    last_ops.push_back(absl::StrCat("rank ", r, ": ",
                                    ops.empty() ? std::string("none recorded")
                                                : absl::StrJoin(ops, ", ")));
  }
  std::string report = absl::StrCat(
      "hang report: ",
      coll && !absent.empty()
          ? absl::StrCat(absent.size() == 1 ? "rank " : "ranks ", absl::StrJoin(absent, ", "),
                         " did not arrive at ", DescribeFingerprint(fp), " seq ", seq, "; ")
          : std::string(),
      disagree ? absl::StrCat("the ranks disagree on collective seq ", seq, " (this rank called ",
                              DescribeFingerprint(fp), "; every rank must make the same call): ")
               : std::string(),
      absl::StrJoin(lines, "; "),
      last_ops.empty() ? std::string()
                       : absl::StrCat("; last operations (newest last, up to ",
                                      kShown, " each; peers as world ranks): ",
                                      absl::StrJoin(last_ops, "; "),
                                      unlisted > 0 ? absl::StrCat("; ", unlisted,
                                                                  " more ranks in the dump")
                                                   : std::string()));
  DumpFlight(report, &records);
  if (const char* file = getenv("HCOMM_HANG_REPORT")) {
    std::string path = absl::StrCat(file, ".", engine_->rank());
    if (FILE* f = fopen(path.c_str(), "w")) {
      fprintf(f, "%s\n", report.c_str());
      for (const auto& [w, st] : states) fprintf(f, "--- world rank %d\n%s", w, st.c_str());
      fclose(f);
    }
  }
  return report;
}

void Communicator::DumpFlight(absl::string_view reason,
                              const std::map<int, std::vector<FlightRecorder::Entry>>* ranks) {
  FlightRecorder& fr = engine_->flight();
  if (!fr.enabled()) return;
  // Kept for the dumps after it (a failure's, the destroy's), with or
  // without a file to write now.
  if (ranks != nullptr) fr.KeepReport(*ranks, std::string(reason));
  const std::string& file = engine_->flight_file();
  if (file.empty()) return;
  const int me = engine_->rank();
  // Not the operation's failure: said, and the caller goes on.
  absl::Status written =
      fr.Dump(FlightRecorder::PathFor(file, me), me, engine_->size(), reason);
  if (!written.ok()) {
    fprintf(stderr, "hcomm WARN: rank %d: %s\n", me, std::string(written.message()).c_str());
  }
}

}  // namespace hcomm
