// Hierarchical collectives (API.md "Topology"; docs/topology.md): where a
// communicator's members fall into groups of the same size L >= 2 (by
// host; or, where each host holds one member, by switch), an allreduce,
// broadcast or reduce in three steps over two groups made from it on first
// use, one per group and one per place across the groups:
//
//   allreduce: reduce_scatter within the group (each member gets the
//              group's sum of one L-th of the vector), allreduce of that
//              slice among the members of the same place across groups,
//              allgather within the group;
//   broadcast: scatter within the root's group, broadcast of each slice
//              across groups from the root's group, allgather within;
//   reduce:    reduce_scatter within, reduce of each slice across groups
//              to the root's group, gather to the root within it.
//
// Between groups each rank then moves 1/L of the vector, and the group's
// L members do it at once. The cross-group communicator is hierarchical in
// turn where its own members fall into groups (the hosts of a switch), so
// two hosts' levels and the switches' nest. A vector whose count L does not
// divide is padded (with zeros, dropped afterwards). AVG runs flat.
//
// They run as one collective of this communicator (RunServing; its turn,
// its call check and hang report), after the groups are made (a split,
// itself a collective, so before the turn is taken).
//
// Which runs: algo=hierarchical wherever the shape fits; under auto, the
// cost model's price of each level (PriceHierarchy, algorithms/selector.h)
// against the flat choice, the same on every member.
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status.h"
#include "core/comm/collective_peers.h"
#include "core/comm/communicator.h"

namespace hcomm {

namespace {

// Groups `keys` (by member) by value, in order of first appearance: whether
// there are two or more groups of one size >= 2.
bool GroupBy(const std::vector<std::string>& keys, std::vector<int>* group_of,
             std::vector<int>* index_of, std::vector<std::vector<int>>* members) {
  std::map<std::string, int> index;
  group_of->assign(keys.size(), -1);
  index_of->assign(keys.size(), -1);
  members->clear();
  for (size_t m = 0; m < keys.size(); ++m) {
    auto [it, fresh] = index.emplace(keys[m], static_cast<int>(index.size()));
    if (fresh) members->emplace_back();
    (*group_of)[m] = it->second;
    (*index_of)[m] = static_cast<int>((*members)[it->second].size());
    (*members)[it->second].push_back(static_cast<int>(m));
  }
  if (members->size() < 2 || (*members)[0].size() < 2) return false;
  for (const auto& g : *members) {
    if (g.size() != (*members)[0].size()) return false;
  }
  return true;
}

std::string Us(double us) {
  return us >= 1000 ? absl::StrFormat("%.2f ms", us / 1000) : absl::StrFormat("%.1f us", us);
}

}  // namespace

void Communicator::SetUpHierarchy(const std::vector<std::string>& hosts,
                                  const std::vector<std::string>& switches) {
  const bool switches_known =
      std::none_of(switches.begin(), switches.end(), [](const std::string& s) { return s.empty(); });
  if (GroupBy(hosts, &hier_group_of_, &hier_index_of_, &hier_members_)) {
    hier_level_ = "host";
  } else if (switches_known && GroupBy(switches, &hier_group_of_, &hier_index_of_, &hier_members_)) {
    hier_level_ = "switch";
  } else {
    hier_group_of_.clear();
    hier_index_of_.clear();
    hier_members_.clear();
    return;
  }
  hier_groups_ = static_cast<int>(hier_members_.size());
  hier_local_ = static_cast<int>(hier_members_[0].size());
  // The links of each level, as the cost model knows them: shared memory
  // within a host where its members use it, TCP between hosts, and between
  // switches TCP at switch_link_mbit where that is set.
  const LinkModel between_hosts = LinkModelFor("tcp", link_.cpus_shared);
  LinkModel between_switches = between_hosts;
  if (switch_link_mbit_ > 0) between_switches.gbps = static_cast<double>(switch_link_mbit_) / 8000;
  if (std::string(hier_level_) == "switch") {
    hier_levels_ = {{hier_local_, between_hosts}, {hier_groups_, between_switches}};
    return;
  }
  const std::vector<int>& mine = hier_members_[hier_group_of_[rank_]];
  const int peer = mine[hier_index_of_[rank_] == 0 ? 1 : 0];
  const bool shm = strcmp(engine_->TransportTo(group_to_world_[peer]), "shm") == 0;
  hier_levels_ = {{hier_local_, shm ? LinkModelFor("shm", link_.cpus_shared) : between_hosts}};
  // The hosts by switch: a level of its own where every switch has the
  // same number of them.
  std::vector<std::string> host_switch;
  for (const auto& g : hier_members_) host_switch.push_back(switches[g[0]]);
  std::vector<int> of, at;
  std::vector<std::vector<int>> by_switch;
  const bool nested = switches_known && GroupBy(host_switch, &of, &at, &by_switch);
  if (nested) {
    hier_levels_.push_back({static_cast<int>(by_switch[0].size()), between_hosts});
    hier_levels_.push_back({static_cast<int>(by_switch.size()), between_switches});
  } else {
    std::map<std::string, int> distinct;
    for (const std::string& s : host_switch) ++distinct[s];
    hier_levels_.push_back(
        {hier_groups_, distinct.size() > 1 ? between_switches : between_hosts});
  }
}

bool Communicator::UsesHierarchy(CollectiveOp op, size_t bytes) {
  // (Members all on one host: the shared segment serves them better.)
  if (!HierarchyFits() || bytes == 0 || shm_coll_ != nullptr) return false;
  if (hierarchical_.load(std::memory_order_relaxed)) return true;
  if (forced_algo_.load(std::memory_order_relaxed) != Algorithm::kAuto) return false;
  absl::MutexLock l(&hier_mu_);
  auto& c = hier_choice_;
  if (c.valid && c.op == op && c.bytes == bytes) return c.hierarchical;
  const HierarchyCost cost = PriceHierarchy(op, bytes, hier_levels_, 0, hier_share_);
  c.valid = true;
  c.op = op;
  c.bytes = bytes;
  c.hierarchical = cost.us >= 0 && cost.us < cost.flat_us;
  if (debug_info_ && rank_ == 0) {
    // "allreduce 64 MiB 8 ranks -> hierarchical (hierarchical 9.10 ms:
    // within hosts 1.20 ms + across 7.90 ms, hierarchical; flat 20.40 ms;
    // levels 2 ranks per host at 10.0 GB/s, 2 hosts per switch at
    // 3.0 GB/s, 2 switches at 0.025 GB/s)"
    const bool by_host = std::string(hier_level_) == "host";
    const char* units[] = {"ranks", by_host ? "hosts" : "switches", "switches"};
    const char* groups[] = {hier_level_, by_host ? "switch" : "", ""};
    std::string levels;
    for (size_t i = 0; i < hier_levels_.size(); ++i) {
      const bool top = i + 1 == hier_levels_.size();
      absl::StrAppend(&levels, i == 0 ? "" : ", ", hier_levels_[i].members, " ", units[i],
                      top ? "" : absl::StrCat(" per ", groups[i]),
                      absl::StrFormat(" at %.3g GB/s", hier_levels_[i].link.gbps));
    }
    fprintf(stderr,
            "hcomm INFO: %s %s %d ranks -> %s (hierarchical %s: within %ss %s + across %s, %s; "
            "flat %s; levels %s)\n",
            CollectiveOpName(op), Bytes(bytes).c_str(), size_,
            c.hierarchical ? "hierarchical" : "flat", Us(cost.us).c_str(), hier_level_,
            Us(cost.within_us).c_str(), Us(cost.across_us).c_str(),
            cost.across_hierarchical ? "hierarchical" : "flat", Us(cost.flat_us).c_str(),
            levels.c_str());
  }
  return c.hierarchical;
}

absl::Status Communicator::MakeHierarchyGroups() {
  if (hier_within_ != nullptr) return absl::OkStatus();
  const std::string what = absl::StrCat("hierarchical collective, ", hier_level_);
  auto within = Split(hier_group_of_[rank_], rank_);
  if (!within.ok()) return Annotate(within.status(), absl::StrCat(what, " group"));
  auto across = Split(hier_index_of_[rank_], rank_);
  if (!across.ok()) {
    (*within)->Destroy().IgnoreError();
    return Annotate(across.status(), absl::StrCat(what, "s' group"));
  }
  // The cross-group communicators of every place run at once, sharing
  // the links between groups.
  (*across)->hier_share_ = hier_share_ * hier_local_;
  hier_within_ = std::move(*within);
  hier_across_ = std::move(*across);
  return absl::OkStatus();
}

int Communicator::AcrossRank(int group, int index) const {
  const int member = hier_members_[group][index];
  int rank = 0;
  for (const auto& g : hier_members_) rank += g[index] < member;
  return rank;
}

absl::Status Communicator::RunHierarchical(const CollectiveCall& call) {
  switch (call.op) {
    case CollectiveOp::kAllReduce:
      return HierarchicalAllReduce(call.send, call.recv, call.count, call.dtype, call.reduce);
    case CollectiveOp::kBroadcast:
      return HierarchicalBroadcast(call.recv, call.count, call.dtype, call.root);
    case CollectiveOp::kReduce:
      return HierarchicalReduce(call.send, call.recv, call.count, call.dtype, call.reduce,
                                call.root);
    default:
      return Internal(absl::StrCat("no hierarchical ", CollectiveOpName(call.op)));
  }
}

absl::Status Communicator::HierarchicalAllReduce(const void* send, void* recv, size_t count,
                                                 DataType t, ReduceOp op) {
  const size_t esize = DataTypeSize(t);
  const size_t local = static_cast<size_t>(hier_local_);
  const size_t chunk = (count + local - 1) / local;
  const bool padded = chunk * local != count;
  const void* in = send;
  void* out = recv;
  if (padded) {
    char* pad = ScratchSlot(0, 2 * chunk * local * esize);
    if (pad == nullptr) return OutOfMem("hierarchical allreduce: no memory for padding");
    memset(pad, 0, chunk * local * esize);
    memcpy(pad, send, count * esize);
    in = pad;
    out = pad + chunk * local * esize;
  }
  char* slice = ScratchSlot(1, chunk * esize);
  if (slice == nullptr) return OutOfMem("hierarchical allreduce: no memory for a slice");
  const std::string within = absl::StrCat(" (within the ", hier_level_, ")");
  HCOMM_RETURN_IF_ERROR(Annotate(hier_within_->ReduceScatter(in, slice, chunk, t, op),
                                 absl::StrCat("hierarchical allreduce, step 1 of 3", within)));
  HCOMM_RETURN_IF_ERROR(Annotate(
      hier_across_->AllReduce(slice, slice, chunk, t, op),
      absl::StrCat("hierarchical allreduce, step 2 of 3 (across ", hier_level_, "s)")));
  HCOMM_RETURN_IF_ERROR(Annotate(hier_within_->AllGather(slice, out, chunk, t),
                                 absl::StrCat("hierarchical allreduce, step 3 of 3", within)));
  if (padded) memcpy(recv, out, count * esize);
  return absl::OkStatus();
}

absl::Status Communicator::HierarchicalBroadcast(void* buf, size_t count, DataType t, int root) {
  const size_t esize = DataTypeSize(t);
  const size_t local = static_cast<size_t>(hier_local_);
  const size_t chunk = (count + local - 1) / local;
  const bool padded = chunk * local != count;
  const int root_group = hier_group_of_[root];
  const int mine = hier_group_of_[rank_];
  char* whole = static_cast<char*>(buf);
  if (padded) {
    whole = ScratchSlot(0, chunk * local * esize);
    if (whole == nullptr) return OutOfMem("hierarchical broadcast: no memory for padding");
    if (rank_ == root) {
      memcpy(whole, buf, count * esize);
      memset(whole + count * esize, 0, (chunk * local - count) * esize);
    }
  }
  char* slice = ScratchSlot(1, chunk * esize);
  if (slice == nullptr) return OutOfMem("hierarchical broadcast: no memory for a slice");
  const std::string within = absl::StrCat(" (within the ", hier_level_, ")");
  if (mine == root_group) {
    HCOMM_RETURN_IF_ERROR(
        Annotate(hier_within_->Scatter(whole, slice, chunk, t, hier_index_of_[root]),
                 absl::StrCat("hierarchical broadcast, step 1 of 3", within)));
  }
  HCOMM_RETURN_IF_ERROR(Annotate(
      hier_across_->Broadcast(slice, chunk, t, AcrossRank(root_group, hier_index_of_[rank_])),
      absl::StrCat("hierarchical broadcast, step 2 of 3 (across ", hier_level_, "s)")));
  HCOMM_RETURN_IF_ERROR(Annotate(hier_within_->AllGather(slice, whole, chunk, t),
                                 absl::StrCat("hierarchical broadcast, step 3 of 3", within)));
  if (padded) memcpy(buf, whole, count * esize);
  return absl::OkStatus();
}

absl::Status Communicator::HierarchicalReduce(const void* send, void* recv, size_t count,
                                              DataType t, ReduceOp op, int root) {
  const size_t esize = DataTypeSize(t);
  const size_t local = static_cast<size_t>(hier_local_);
  const size_t chunk = (count + local - 1) / local;
  const bool padded = chunk * local != count;
  const int root_group = hier_group_of_[root];
  const void* in = send;
  char* out = static_cast<char*>(recv);
  if (padded) {
    char* pad = ScratchSlot(0, 2 * chunk * local * esize);
    if (pad == nullptr) return OutOfMem("hierarchical reduce: no memory for padding");
    memset(pad, 0, chunk * local * esize);
    memcpy(pad, send, count * esize);
    in = pad;
    out = pad + chunk * local * esize;
  }
  char* slice = ScratchSlot(1, 2 * chunk * esize);
  if (slice == nullptr) return OutOfMem("hierarchical reduce: no memory for a slice");
  char* reduced = slice + chunk * esize;
  const std::string within = absl::StrCat(" (within the ", hier_level_, ")");
  HCOMM_RETURN_IF_ERROR(Annotate(hier_within_->ReduceScatter(in, slice, chunk, t, op),
                                 absl::StrCat("hierarchical reduce, step 1 of 3", within)));
  HCOMM_RETURN_IF_ERROR(Annotate(
      hier_across_->Reduce(slice, reduced, chunk, t, op,
                           AcrossRank(root_group, hier_index_of_[rank_])),
      absl::StrCat("hierarchical reduce, step 2 of 3 (across ", hier_level_, "s)")));
  if (hier_group_of_[rank_] == root_group) {
    HCOMM_RETURN_IF_ERROR(
        Annotate(hier_within_->Gather(reduced, out, chunk, t, hier_index_of_[root]),
                 absl::StrCat("hierarchical reduce, step 3 of 3", within)));
    if (padded && rank_ == root) memcpy(recv, out, count * esize);
  }
  return absl::OkStatus();
}

}  // namespace hcomm
