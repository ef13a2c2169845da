// Who is where: the host each rank runs on and the CPUs it may use, as it
// published at init, and what follows from that for the ranks of a host.
//
//   std::vector<Placement> where = ...;          // by rank, the same everywhere
//   bool shared = CpusShared(where, my_host);    // waits yield, not spin
//
// Switches: switches.h; the host's NUMA nodes and CPUs: host_topology.h.
#ifndef HCOMM_CORE_TOPOLOGY_PLACEMENT_H_
#define HCOMM_CORE_TOPOLOGY_PLACEMENT_H_

#include <string>
#include <vector>

namespace hcomm {

struct Placement {
  std::string host;  // host id
  std::string cpus;  // the CPUs it may use, "0" or "0,1" ("-": unknown)
  std::string switch_id;  // its switch (core/topology/switches.h); "": unknown
  int numa = -1;  // the NUMA node all its CPUs are on (host_topology.h); -1: unknown or several
};

// The CPUs this process may run on, "0,1,..." ("-" where it cannot tell).
std::string OwnCpus();

// Whether the ranks placed on `host` outnumber the CPUs they may use
// together (each rank pinned to a CPU of its own is not).
bool CpusShared(const std::vector<Placement>& ranks, const std::string& host);
// Whether the ranks placed on `host` are at least as many as the CPUs they
// may use together: with each rank's own thread busy, no CPU is left idle
// for another thread of theirs.
bool CpusFilled(const std::vector<Placement>& ranks, const std::string& host);

}  // namespace hcomm

#endif  // HCOMM_CORE_TOPOLOGY_PLACEMENT_H_
