#include "transports/tcp/tcp_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace hcomm {
namespace {

class NoFrames : public FrameSink {
 public:
  void* OnFrame(int, const FrameMeta&, uint64_t) override {
    ADD_FAILURE() << "no frame expected";
    return nullptr;
  }
  void OnPayload(int, const FrameMeta&, uint64_t) override {}
  void OnConnectionLost(int, const absl::Status&) override {}
};

// A watched descriptor ends a blocking Poll (counted as an event) and is
// left for its owner to read; while it is not readable, Poll waits; a Poll
// that does not wait does not count it.
TEST(TcpTransportTest, WatchedFdEndsAWaitWithoutBeingRead) {
  NoFrames sink;
  TcpTransport t(0, 2, &sink);
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(t.WatchFd(fd));
  EXPECT_EQ(0, t.Poll(absl::ZeroDuration()));
  EXPECT_EQ(0, t.Poll(absl::Milliseconds(20)));  // nothing: the wait runs out
  uint64_t one = 1;
  ASSERT_EQ(8, write(fd, &one, sizeof one));
  // 0 would mean the 10 s ran out.
  EXPECT_EQ(1, t.Poll(absl::Seconds(10)));
  EXPECT_EQ(1, t.Poll(absl::Milliseconds(20)));  // still readable: not read
  // A poll that does not wait does not count it: a stale byte is no work.
  EXPECT_EQ(0, t.Poll(absl::ZeroDuration()));
  uint64_t got = 0;
  ASSERT_EQ(8, read(fd, &got, sizeof got));
  EXPECT_EQ(0, t.Poll(absl::ZeroDuration()));
  close(fd);
}

}  // namespace
}  // namespace hcomm
