// Reserving the pages of a file in /dev/shm.
//
// tmpfs hands out pages on first touch, so a file sized with ftruncate alone
// maps fine and kills the process with SIGBUS when /dev/shm runs out of
// room. Every segment hcomm makes there reserves its pages first:
//
//   HCOMM_ASSIGN_OR_RETURN(size_t slot, ReserveHalving(fd, name, kSlot, kMinSlot,
//                                                      [&](size_t s) { return Size(n, s); }));
//
// And every segment hcomm maps that another process made is opened here,
// checked on the descriptor itself, before anything maps it:
//
//   struct stat st;
//   HCOMM_ASSIGN_OR_RETURN(int fd, OpenExistingSegment(name, &st));
//   void* base = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
#ifndef HCOMM_CORE_BASE_SHM_FILE_H_
#define HCOMM_CORE_BASE_SHM_FILE_H_

#include <sys/stat.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace hcomm {

// Ends every warning that /dev/shm was short of room: what to do about it.
inline constexpr char kLargerDevShm[] =
    "(a larger /dev/shm restores the full size: docker run --shm-size=1g)";

// Sizes the open /dev/shm file `fd` (named `name` in messages) to
// bytes_for(unit) and reserves its pages, halving `unit` while the
// reservation finds no room and unit > min_unit (tmpfs gives back what a
// failed reservation took). Returns the unit reserved. OUT_OF_MEM ("cannot
// reserve N bytes in /dev/shm for NAME: No space left on device") where not
// even min_unit fits; UNAVAILABLE where ftruncate or posix_fallocate fail
// otherwise. The caller closes `fd` and removes the name on failure.
absl::StatusOr<size_t> ReserveHalving(int fd, const std::string& name, size_t unit,
                                      size_t min_unit,
                                      const std::function<size_t(size_t)>& bytes_for);

// Checks the open segment `fd` (`path` in messages, e.g. "/dev/shm/hcomm-x")
// with fstat and fills *st: it must be a regular file owned by this process's
// effective uid that neither group nor others may write (mode & 022 == 0).
// Whoever else could write the file could change what hcomm reads from it
// (lengths, offsets, futex words) or could have planted it. Refusals name the
// path, its owner uid and mode and what was expected: PERMISSION_DENIED for
// the owner or the mode, INVALID_ARGUMENT for a file that is not regular;
// INTERNAL where fstat fails.
absl::Status CheckSegment(int fd, const std::string& path, struct stat* st);

// Opens the existing /dev/shm segment `name` ("/hcomm-...", as for
// shm_open) read-write, never following a symbolic link (O_NOFOLLOW), and
// runs CheckSegment on the descriptor, so what was checked is what the
// caller maps (no window between the check and mmap). Returns the fd, which
// the caller closes; on error nothing stays open. Errors name the path:
// INVALID_ARGUMENT where `name` is not "/" and one file name, where the path
// is a symbolic link, a directory or another file that is not regular;
// NO_DEVICE where no such file exists (a caller may wait for its creator);
// PERMISSION_DENIED where the file may not be opened or CheckSegment
// refuses it; OUT_OF_MEM where descriptors or memory ran out; UNAVAILABLE
// otherwise.
absl::StatusOr<int> OpenExistingSegment(const std::string& name, struct stat* st);

// Leaves the mapping [base, base + bytes) out of every fork's child
// (madvise MADV_DONTFORK). For a communicator's segments: the child's calls
// with its parent's communicators are refused and never touch them, and a
// copy in a child that outlives the parent would keep their pages in
// /dev/shm. (Channels work in a child and keep their mappings.)
void KeepFromForks(void* base, size_t bytes);

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_SHM_FILE_H_
