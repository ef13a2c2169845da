#include "core/base/shm_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

// The file is sized and its pages are taken from /dev/shm (its blocks
// count them) before anything touches them; with room, the first unit
// stands. (Halving on a full /dev/shm runs in
// tests/acceptance/small_devshm_test.sh, which can mount a small one.)
TEST(ShmFileTest, ReservesEveryPageOfTheFirstUnitThatFits) {
  const std::string name =
      absl::StrCat("/hcomm-shm-file-test-", getpid(), "x", std::random_device{}());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  auto unit = ReserveHalving(fd, name, 64 << 10, 4096, [](size_t u) { return 3 * u + 4096; });
  ASSERT_TRUE(unit.ok()) << unit.status();
  EXPECT_EQ(*unit, size_t{64} << 10);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), 3 * (size_t{64} << 10) + 4096);
  EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, static_cast<size_t>(st.st_size));
  close(fd);
  shm_unlink(name.c_str());
}

TEST(ShmFileTest, AFileThatCannotBeSizedIsNamed) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto unit = ReserveHalving(fds[0], "/not-shm", 4096, 4096, [](size_t u) { return u; });
  EXPECT_EQ(CodeOf(unit.status()), ErrorCode::kUnavailable) << unit.status();
  EXPECT_NE(unit.status().message().find("/dev/shm/not-shm"), absl::string_view::npos)
      << unit.status();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace hcomm
