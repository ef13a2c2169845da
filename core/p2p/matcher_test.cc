#include "core/p2p/matcher.h"

#include "gtest/gtest.h"

namespace hcomm {
namespace {

std::shared_ptr<Request> Recv(int peer, int tag) {
  auto r = std::make_shared<Request>();
  r->peer = peer;
  r->tag = tag;
  return r;
}

Unexpected Arrival(int source, int tag, uint64_t marker) {
  Unexpected u;
  u.source = source;
  u.tag = tag;
  u.send_id = marker;
  u.complete = true;
  return u;
}

TEST(MatcherTest, ArrivalTakesFirstPostedThatAccepts) {
  Matcher m;
  auto a = Recv(1, 5), b = Recv(kAnySource, 7), c = Recv(2, kAnyTag), d = Recv(kAnySource, kAnyTag);
  m.Post(a);
  m.Post(b);
  m.Post(c);
  m.Post(d);
  EXPECT_EQ(m.TakePosted(2, 7), b);  // b was posted before c
  EXPECT_EQ(m.TakePosted(2, 7), c);
  EXPECT_EQ(m.TakePosted(3, 9), d);
  EXPECT_EQ(m.TakePosted(3, 9), nullptr);
  EXPECT_EQ(m.TakePosted(1, 5), a);
}

TEST(MatcherTest, ReceiveTakesEarliestArrivalItAccepts) {
  Matcher m;
  m.AddUnexpected(Arrival(1, 3, 100));
  m.AddUnexpected(Arrival(2, 4, 200));
  m.AddUnexpected(Arrival(1, 4, 300));
  m.AddUnexpected(Arrival(1, 3, 400));
  auto it = m.FindUnexpected(1, 4);
  ASSERT_NE(it, m.unexpected().end());
  EXPECT_EQ(it->send_id, 300u);  // out-of-order tag
  m.EraseUnexpected(it);
  it = m.FindUnexpected(1, 3);
  EXPECT_EQ(it->send_id, 100u);  // same (source, tag): arrival order
  m.EraseUnexpected(it);
  it = m.FindUnexpected(kAnySource, kAnyTag);
  EXPECT_EQ(it->send_id, 200u);
  m.EraseUnexpected(it);
  it = m.FindUnexpected(kAnySource, 3);
  EXPECT_EQ(it->send_id, 400u);
  m.EraseUnexpected(it);
  EXPECT_EQ(m.FindUnexpected(kAnySource, kAnyTag), m.unexpected().end());
}

TEST(MatcherTest, ClaimedArrivalIsSkipped) {
  Matcher m;
  Unexpected* first = m.AddUnexpected(Arrival(1, 3, 1));
  m.AddUnexpected(Arrival(1, 3, 2));
  first->claimed = Recv(1, 3);
  EXPECT_EQ(m.FindUnexpected(1, 3)->send_id, 2u);
  m.EraseUnexpected(first);
  EXPECT_EQ(m.unexpected().size(), 1u);
}

TEST(MatcherTest, RemovePosted) {
  Matcher m;
  auto a = Recv(1, 1), b = Recv(1, 1);
  m.Post(a);
  m.Post(b);
  EXPECT_TRUE(m.RemovePosted(a.get()));
  EXPECT_FALSE(m.RemovePosted(a.get()));
  EXPECT_EQ(m.TakePosted(1, 1), b);
}

TEST(MatcherTest, WildcardsOnlyOnTheReceiveSide) {
  EXPECT_TRUE(Matcher::Accepts(kAnySource, kAnyTag, 3, 9));
  EXPECT_TRUE(Matcher::Accepts(3, kAnyTag, 3, 0));
  EXPECT_FALSE(Matcher::Accepts(3, 1, 3, 2));
  EXPECT_FALSE(Matcher::Accepts(2, 1, 3, 1));
}

}  // namespace
}  // namespace hcomm
