// The hierarchical allreduce (algo=hierarchical; API.md "Topology"): where a
// communicator spans several hosts with the same number L >= 2 of ranks on
// each, an allreduce in three steps on two groups made from it on first
// use, one per host and one per local index across the hosts:
//
//   1. reduce_scatter within the host: each of its L ranks gets the host's
//      sum of one L-th of the vector (over shared memory);
//   2. allreduce of that slice across the hosts, among the ranks of the
//      same local index (one slice per rank crosses the network);
//   3. allgather within the host: every rank gets the whole result.
//
// Between hosts this moves 2(H-1)/H of the vector per rank and direction
// (H hosts), where a flat ring over all n = H*L ranks moves 2(n-1)/n of it
// over each host's links: less by (n-1)H / ((H-1)n), e.g. 1.5x for 2 hosts
// of 2 ranks and 1.75x for 2 hosts of 4. A vector whose count L does not
// divide is padded (with zeros, dropped afterwards). AVG runs flat.
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "core/base/status.h"
#include "core/comm/communicator.h"

namespace hcomm {

absl::Status Communicator::HierarchicalAllReduce(const void* send, void* recv, size_t count,
                                                 DataType t, ReduceOp op) {
  if (intra_host_ == nullptr) {
    // Hosts by their lowest rank; a rank's local index by rank within its host.
    std::map<std::string, int> host_index, seen;
    int my_host = -1, my_local = -1;
    for (int g = 0; g < size_; ++g) {
      const std::string& h = engine_->placement(group_to_world_[g]).host;
      const int index = host_index.emplace(h, static_cast<int>(host_index.size())).first->second;
      const int local = seen[h]++;
      if (g == rank_) {
        my_host = index;
        my_local = local;
      }
    }
    auto intra = Split(my_host, rank_);
    if (!intra.ok()) return Annotate(intra.status(), "hierarchical allreduce, host group");
    auto across = Split(my_local, rank_);
    if (!across.ok()) {
      (*intra)->Destroy().IgnoreError();
      return Annotate(across.status(), "hierarchical allreduce, cross-host group");
    }
    intra_host_ = std::move(*intra);
    across_hosts_ = std::move(*across);
  }
  const size_t esize = DataTypeSize(t);
  const size_t local = static_cast<size_t>(hier_local_);
  const size_t chunk = (count + local - 1) / local;
  const bool padded = chunk * local != count;
  const void* in = send;
  void* out = recv;
  if (padded) {
    char* pad = ScratchSlot(0, 2 * chunk * local * esize);
    memset(pad, 0, chunk * local * esize);
    memcpy(pad, send, count * esize);
    in = pad;
    out = pad + chunk * local * esize;
  }
  char* slice = ScratchSlot(1, chunk * esize);
  HCOMM_RETURN_IF_ERROR(Annotate(intra_host_->ReduceScatter(in, slice, chunk, t, op),
                                 "hierarchical allreduce, step 1 of 3 (within the host)"));
  HCOMM_RETURN_IF_ERROR(Annotate(across_hosts_->AllReduce(slice, slice, chunk, t, op),
                                 "hierarchical allreduce, step 2 of 3 (across hosts)"));
  HCOMM_RETURN_IF_ERROR(Annotate(intra_host_->AllGather(slice, out, chunk, t),
                                 "hierarchical allreduce, step 3 of 3 (within the host)"));
  if (padded) memcpy(recv, out, count * esize);
  return absl::OkStatus();
}

}  // namespace hcomm
