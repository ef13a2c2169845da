#include "algorithms/collective.h"

#include <algorithm>
#include <utility>

#include "core/base/status.h"

namespace hcomm {

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kSegment: return "shared memory";
    case Algorithm::kHierarchical: return "hierarchical";
  }
  return "unknown";
}

std::vector<int> RingOrderByPlacement(const std::vector<std::string>& placement) {
  const int n = static_cast<int>(placement.size());
  std::vector<int> order;
  std::vector<bool> placed(n, false);
  for (int first = 0; first < n; ++first) {
    if (placed[first]) continue;
    for (int r = first; r < n; ++r) {
      if (!placed[r] && placement[r] == placement[first]) {
        placed[r] = true;
        order.push_back(r);
      }
    }
  }
  for (int v = 0; v < n; ++v) {
    if (order[v] != v) return order;
  }
  return {};
}

ReorderedPeers::ReorderedPeers(Peers& base, std::vector<int> order)
    : base_(base), order_(std::move(order)) {
  for (int v = 0; v < static_cast<int>(order_.size()); ++v) {
    if (order_[v] == base_.rank()) rank_ = v;
  }
}

absl::StatusOr<WideBuffers> Widen(Peers& p, const void* send, size_t in_count, size_t out_count,
                                  DataType t) {
  float* in = reinterpret_cast<float*>(p.Scratch(2, std::max<size_t>(in_count, 1) * 4));
  float* out = reinterpret_cast<float*>(p.Scratch(3, std::max<size_t>(out_count, 1) * 4));
  if (in == nullptr || out == nullptr) {
    return OutOfMem("cannot allocate the float32 staging buffers");
  }
  WidenToFloat32(in, send, in_count, t);
  return WideBuffers{in, out};
}

absl::Status OnFloat32(Peers& p, const void* send, void* recv, size_t in_count,
                       size_t out_count, DataType t, bool has_output,
                       absl::FunctionRef<absl::Status(const void*, void*, DataType)> body) {
  HCOMM_ASSIGN_OR_RETURN(WideBuffers w, Widen(p, send, in_count, out_count, t));
  HCOMM_RETURN_IF_ERROR(body(w.in, w.out, DataType::kFloat32));
  if (has_output) NarrowFromFloat32(recv, w.out, out_count, t);
  return absl::OkStatus();
}

InFlight::~InFlight() {
  // Only on an error path: WaitAll empties reqs_ once all have ended.
  for (auto& r : reqs_) peers_.Withdraw(r);
}

absl::Status InFlight::Send(const void* buf, size_t bytes, int peer) {
  if (peers_.SendNow(buf, bytes, peer)) return absl::OkStatus();
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r, peers_.Isend(buf, bytes, peer));
  reqs_.push_back(std::move(r));
  return absl::OkStatus();
}

absl::Status InFlight::Recv(void* buf, size_t bytes, int peer) {
  return RecvRequest(buf, bytes, peer).status();
}

absl::Status InFlight::Exchange(const void* send, void* recv, size_t bytes, int peer) {
  if (reqs_.empty() && peers_.SendNow(send, bytes, peer)) {
    if (peers_.RecvNow(recv, bytes, peer)) return absl::OkStatus();
    HCOMM_RETURN_IF_ERROR(Recv(recv, bytes, peer));
    return WaitAll();
  }
  HCOMM_RETURN_IF_ERROR(Recv(recv, bytes, peer));
  HCOMM_RETURN_IF_ERROR(Send(send, bytes, peer));
  return WaitAll();
}

absl::StatusOr<Request*> InFlight::RecvRequest(void* buf, size_t bytes, int peer) {
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r, peers_.Irecv(buf, bytes, peer));
  reqs_.push_back(std::move(r));
  return reqs_.back().get();
}

absl::Status InFlight::Wait(Request* r) { return peers_.Wait(r); }

absl::Status InFlight::WaitAll() {
  absl::Status first;
  for (auto& r : reqs_) {
    absl::Status s = peers_.Wait(r.get());
    if (!s.ok() && first.ok()) first = s;
    if (!first.ok()) break;  // the destructor withdraws the rest
  }
  if (first.ok()) reqs_.clear();
  return first;
}

}  // namespace hcomm
