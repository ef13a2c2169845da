#include "core/p2p/matcher.h"

namespace hcomm {

std::shared_ptr<Request> Matcher::TakePosted(int source, int tag) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (Accepts((*it)->peer, (*it)->tag, source, tag)) {
      std::shared_ptr<Request> r = std::move(*it);
      if (it == posted_.begin()) {
        posted_.pop_front();
      } else {
        posted_.erase(it);
      }
      return r;
    }
  }
  return nullptr;
}

Matcher::UnexpectedList::iterator Matcher::FindUnexpected(int want_source, int want_tag) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    // An eager arrival already claimed by a receive is no longer available.
    if (it->claimed) continue;
    if (Accepts(want_source, want_tag, it->source, it->tag)) return it;
  }
  return unexpected_.end();
}

bool Matcher::RemovePosted(const Request* r) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (it->get() == r) {
      posted_.erase(it);
      return true;
    }
  }
  return false;
}

Unexpected* Matcher::AddUnexpected(Unexpected u) {
  unexpected_.push_back(std::move(u));
  arrivals_.fetch_add(1, std::memory_order_relaxed);
  return &unexpected_.back();
}

Matcher::~Matcher() {
  for (auto it = unexpected_.begin(); it != unexpected_.end();) it = EraseUnexpected(it);
}

Matcher::UnexpectedList::iterator Matcher::EraseUnexpected(UnexpectedList::iterator it) {
  if (flow_ != nullptr) {
    if (it->held > 0) flow_->Unhold(it->source, it->held);
    if (it->held_rts) flow_->UnholdRts(it->source);
  }
  return unexpected_.erase(it);
}

void Matcher::EraseUnexpected(const Unexpected* u) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (&*it == u) {
      EraseUnexpected(it);
      return;
    }
  }
}

}  // namespace hcomm
