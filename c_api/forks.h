// Which process a handle belongs to.
//
// fork() copies a process into a child: its memory, handles and all, but
// none of its threads, while the sockets and shared memory behind those
// handles stay shared with the parent. A communicator or request used,
// aborted or destroyed from the child would act on the parent's job: its
// destroy would tell the parent's peers that the parent left, and would wait
// for threads that exist only in the parent. So every communicator and
// request handle records hcomm::ForkCount() (core/base/forks.h) when it is made;
// a handle whose count is not the caller's was made by an ancestor, and the
// C API refuses to use it and lets it go without touching anything the
// parent uses (Keep).
//
//   if (comm->forks != hcomm::ForkCount()) ... a parent's communicator
//   hcomm_c::Keep(pointer);   // kept reachable, never freed
#ifndef HCOMM_C_API_FORKS_H_
#define HCOMM_C_API_FORKS_H_

#include "core/base/forks.h"

namespace hcomm_c {

// Keeps `p` reachable for the life of the process: destroyed handles (so a
// later call with one is told it was destroyed instead of reading freed
// memory) and what a child lets go of its parent's (whose end would act on
// the parent's job). Listed, not lost, so a leak checker does not report
// them. Safe in the child of a fork made while another thread was here.
void Keep(const void* p);

}  // namespace hcomm_c

#endif  // HCOMM_C_API_FORKS_H_
