#include "core/base/shm_file.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
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

void KeepFromForks(void* base, size_t bytes) {
  // Fails only for a range that is not a mapping: nothing to keep then.
  (void)madvise(base, bytes, MADV_DONTFORK);
}

}  // namespace hcomm
