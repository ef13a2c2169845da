// net::Fd across fork(): the child closes what the parent's Fds owned, and
// an Fd it inherited closes nothing there.
#include "core/base/net.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>

#include "core/base/forks.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

// Runs `child` in a forked child; true if it returned true there.
template <typename F>
bool InChild(F child) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child() ? 0 : 1);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST(FdTest, AForksChildClosesWhatTheParentsFdsOwn) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  const uint32_t forks = ForkCount();
  EXPECT_TRUE(InChild([&] {
    return ForkCount() == forks + 1 && !IsOpen(a.get()) && !IsOpen(b.get());
  }));
  // The parent's are untouched.
  EXPECT_TRUE(IsOpen(a.get()));
  EXPECT_TRUE(IsOpen(b.get()));
  EXPECT_EQ(ForkCount(), forks);
}

TEST(FdTest, AnInheritedFdClosesNothingInTheChild) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  EXPECT_TRUE(InChild([&] {
    // The number is free in the child; a new file takes it.
    const int fresh = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fresh != a.get()) return false;
    a.reset();  // the inherited Fd: must not close `fresh`
    const bool kept = IsOpen(fresh);
    net::Fd mine(fresh);  // one made in the child is the child's to close
    mine.reset();
    return kept && !IsOpen(fresh);
  }));
  EXPECT_TRUE(IsOpen(a.get()));
}

TEST(FdTest, APlainDescriptorIsClosedInTheChildOnlyWhileOwned) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  net::Fd::Own(sv[0]);
  EXPECT_TRUE(InChild([&] { return !IsOpen(sv[0]) && IsOpen(sv[1]); }));
  net::Fd::Disown(sv[0]);
  EXPECT_TRUE(InChild([&] { return IsOpen(sv[0]); }));
  close(sv[0]);
  close(sv[1]);
}

TEST(FdTest, MovedAndReleasedFdsKeepTheirOwnership) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  net::Fd a(sv[0]);
  net::Fd moved(std::move(a));
  net::Fd assigned;
  assigned = net::Fd(sv[1]);
  EXPECT_TRUE(InChild([&] { return !IsOpen(sv[0]) && !IsOpen(sv[1]); }));
  const int raw = moved.release();  // the caller's now: not closed in a child
  EXPECT_TRUE(InChild([&] { return IsOpen(raw) && !IsOpen(sv[1]); }));
  close(raw);
}

}  // namespace
}  // namespace hcomm
