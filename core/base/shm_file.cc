#include "core/base/shm_file.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"

namespace hcomm {

absl::StatusOr<size_t> ReserveHalving(int fd, const std::string& name, size_t unit,
                                      size_t min_unit,
                                      const std::function<size_t(size_t)>& bytes_for) {
  for (;; unit /= 2) {
    const size_t bytes = bytes_for(unit);
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      return Unavailable(
          absl::StrCat("cannot size /dev/shm", name, " to ", bytes, " bytes: ", strerror(errno)));
    }
    const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (e == 0) return unit;
    if (e == ENOSPC && unit > min_unit) continue;
    const std::string what =
        absl::StrCat("cannot reserve ", bytes, " bytes in /dev/shm for ", name, ": ", strerror(e));
    return e == ENOSPC ? OutOfMem(what) : Unavailable(what);
  }
}

namespace {

// "0666" and the like: the permission bits of a st_mode.
std::string Octal(mode_t mode) {
  char buf[8];
  snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

absl::Status CheckSegment(int fd, const std::string& path, struct stat* st) {
  if (fstat(fd, st) != 0) {
    return Internal(absl::StrCat("fstat of ", path, " failed: ", strerror(errno)));
  }
  const uid_t me = geteuid();
  const std::string expected = absl::StrCat(
      "; hcomm maps only a regular file owned by uid ", me,
      " (this process's user) with no group or other write permission");
  if (!S_ISREG(st->st_mode)) {
    return InvalidArgument(absl::StrCat("refusing shared-memory segment ", path, ": it is ",
                                        KindOf(st->st_mode), " (owner uid ", st->st_uid,
                                        ", mode ", Octal(st->st_mode), ")", expected));
  }
  if (st->st_uid != me || (st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return PermissionDenied(absl::StrCat(
        "refusing shared-memory segment ", path, ": it is owned by uid ", st->st_uid,
        " with mode ", Octal(st->st_mode), expected,
        " (remove the file if it is not hcomm's, or fix its owner and mode)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> OpenExistingSegment(const std::string& name, struct stat* st) {
  // shm_open's rule: one file name after the slash. Checked here because
  // open() on the path would otherwise resolve "/../x" or "/a/b".
  const std::string path = absl::StrCat("/dev/shm", name);
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name == "/." || name == "/.." || name.size() - 1 > NAME_MAX ||
      name.find('\0') != std::string::npos) {
    return InvalidArgument(absl::StrCat("'", name.substr(0, 300),
                                        "' is not a shared-memory segment name (\"/\" and one "
                                        "file name of at most ", NAME_MAX, " bytes)"));
  }
  // O_NONBLOCK: a FIFO put in the segment's place must not hang the open.
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    const std::string what = absl::StrCat("cannot open shared-memory segment ", path, ": ");
    switch (e) {
      case ENOENT:
        return NoDevice(absl::StrCat(what, "it does not exist"));
      case ELOOP:
        return InvalidArgument(absl::StrCat(
            "refusing shared-memory segment ", path,
            ": it is a symbolic link, which hcomm never follows; expected a regular file owned "
            "by uid ", geteuid(), " (this process's user)"));
      case EISDIR:
      case ENXIO:
        return InvalidArgument(absl::StrCat("refusing shared-memory segment ", path,
                                            ": it is not a regular file (", strerror(e), ")"));
      case EACCES:
      case EPERM:
        return PermissionDenied(absl::StrCat(what, strerror(e)));
      case EMFILE:
      case ENFILE:
      case ENOMEM:
        return OutOfMem(absl::StrCat(what, strerror(e)));
      default:
        return Unavailable(absl::StrCat(what, strerror(e)));
    }
  }
  absl::Status s = CheckSegment(fd, path, st);
  if (!s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

void KeepFromForks(void* base, size_t bytes) {
  // Fails only for a range that is not a mapping: nothing to keep then.
  (void)madvise(base, bytes, MADV_DONTFORK);
}

}  // namespace hcomm
