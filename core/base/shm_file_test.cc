#include "core/base/shm_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

// A fresh /dev/shm name for one test: "/hcomm-shm-file-test-<pid>x<rand>-<tag>".
std::string TestName(const char* tag) {
  return absl::StrCat("/hcomm-shm-file-test-", getpid(), "x", std::random_device{}(), "-", tag);
}

// Makes /dev/shm<name> with `mode` (umask aside) and returns its path.
std::string MakeSegment(const std::string& name, mode_t mode) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, 4096), 0);
  EXPECT_EQ(fchmod(fd, mode), 0);
  close(fd);
  return absl::StrCat("/dev/shm", name);
}

TEST(ShmFileTest, OpensASegmentOfThisUserWithAnOwnerOnlyMode) {
  const std::string name = TestName("good");
  MakeSegment(name, 0644);
  struct stat st;
  auto fd = OpenExistingSegment(name, &st);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(st.st_size, 4096);
  EXPECT_NE(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0), MAP_FAILED);
  close(*fd);
  shm_unlink(name.c_str());
}

TEST(ShmFileTest, ASegmentOthersCanWriteIsRefused) {
  for (mode_t mode : {0666, 0620, 0602}) {
    const std::string name = TestName("mode");
    const std::string path = MakeSegment(name, mode);
    struct stat st;
    auto fd = OpenExistingSegment(name, &st);
    EXPECT_EQ(CodeOf(fd.status()), ErrorCode::kPermissionDenied) << fd.status();
    const std::string m(fd.status().message());
    EXPECT_NE(m.find(path), std::string::npos) << m;
    char octal[8];
    snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(m.find(absl::StrCat("mode ", octal)), std::string::npos) << m;
    EXPECT_NE(m.find("no group or other write"), std::string::npos) << m;
    shm_unlink(name.c_str());
  }
}

TEST(ShmFileTest, ASymlinkOrADirectoryIsRefused) {
  const std::string target = TestName("target");
  const std::string target_path = MakeSegment(target, 0600);
  const std::string link = TestName("link");
  const std::string link_path = absl::StrCat("/dev/shm", link);
  ASSERT_EQ(symlink(target_path.c_str(), link_path.c_str()), 0);
  struct stat st;
  auto fd = OpenExistingSegment(link, &st);
  EXPECT_EQ(CodeOf(fd.status()), ErrorCode::kInvalidArgument) << fd.status();
  EXPECT_NE(fd.status().message().find(link_path), absl::string_view::npos) << fd.status();
  EXPECT_NE(fd.status().message().find("symbolic link"), absl::string_view::npos)
      << fd.status();
  unlink(link_path.c_str());
  shm_unlink(target.c_str());

  const std::string dir = TestName("dir");
  const std::string dir_path = absl::StrCat("/dev/shm", dir);
  ASSERT_EQ(mkdir(dir_path.c_str(), 0700), 0);
  fd = OpenExistingSegment(dir, &st);
  EXPECT_EQ(CodeOf(fd.status()), ErrorCode::kInvalidArgument) << fd.status();
  EXPECT_NE(fd.status().message().find(dir_path), absl::string_view::npos) << fd.status();
  rmdir(dir_path.c_str());
}

TEST(ShmFileTest, ASegmentOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to chown a segment to another uid";
  const std::string name = TestName("owner");
  const std::string path = MakeSegment(name, 0600);
  if (chown(path.c_str(), 65534, 65534) != 0) {
    // Bazel's sandbox maps no uid but root: run the binary outside it.
    const int e = errno;
    shm_unlink(name.c_str());
    GTEST_SKIP() << "chown to uid 65534 failed here: " << strerror(e);
  }
  struct stat st;
  auto fd = OpenExistingSegment(name, &st);
  EXPECT_EQ(CodeOf(fd.status()), ErrorCode::kPermissionDenied) << fd.status();
  const std::string m(fd.status().message());
  EXPECT_NE(m.find("uid 65534"), std::string::npos) << m;
  EXPECT_NE(m.find(absl::StrCat("owned by uid ", geteuid())), std::string::npos) << m;
  shm_unlink(name.c_str());
}

TEST(ShmFileTest, AMissingSegmentIsNoDeviceAndABadNameIsRefused) {
  struct stat st;
  auto fd = OpenExistingSegment(TestName("missing"), &st);
  EXPECT_EQ(CodeOf(fd.status()), ErrorCode::kNoDevice) << fd.status();
  for (const char* bad : {"no-slash", "/a/b", "/..", "/"}) {
    fd = OpenExistingSegment(bad, &st);
    EXPECT_EQ(CodeOf(fd.status()), ErrorCode::kInvalidArgument) << bad << ": " << fd.status();
  }
}

}  // namespace
}  // namespace hcomm
