// Reserving the pages of a file in /dev/shm.
//
// tmpfs hands out pages on first touch, so a file sized with ftruncate alone
// maps fine and kills the process with SIGBUS when /dev/shm runs out of
// room. Every segment hcomm makes there reserves its pages first:
//
//   HCOMM_ASSIGN_OR_RETURN(size_t slot, ReserveHalving(fd, name, kSlot, kMinSlot,
//                                                      [&](size_t s) { return Size(n, s); }));
#ifndef HCOMM_CORE_BASE_SHM_FILE_H_
#define HCOMM_CORE_BASE_SHM_FILE_H_

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

// Leaves the mapping [base, base + bytes) out of every fork's child
// (madvise MADV_DONTFORK). For a communicator's segments: the child's calls
// with its parent's communicators are refused and never touch them, and a
// copy in a child that outlives the parent would keep their pages in
// /dev/shm. (Channels work in a child and keep their mappings.)
void KeepFromForks(void* base, size_t bytes);

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_SHM_FILE_H_
