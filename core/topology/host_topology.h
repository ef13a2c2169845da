// The inside of a host, as hwloc sees it: packages, NUMA nodes, cores, PUs,
// and which NUMA node each CPU belongs to.
//
//   const HostTopology& host = ThisHost();          // loaded once, cached
//   std::string line = host.Describe();             // "1 package, 1 NUMA ..."
//   int node = NumaNodeOf(OwnCpus(), host);         // -1: several or unknown
//
// A host is "flat" when it shows no layout worth placing ranks by: its CPUs
// all belong to one NUMA node (docs/topology.md, "Inside a host").
#ifndef HCOMM_CORE_TOPOLOGY_HOST_TOPOLOGY_H_
#define HCOMM_CORE_TOPOLOGY_HOST_TOPOLOGY_H_

#include <string>
#include <vector>

namespace hcomm {

struct HostTopology {
  // What hwloc found on the whole machine (CPUs outside this process's
  // cgroup included; offline CPUs not); 0 where hwloc failed.
  int packages = 0, numa_nodes = 0, cores = 0, pus = 0;
  // By OS index of a PU (the numbers of OwnCpus()): the hwloc logical index
  // of its NUMA node; -1 unknown. Where memory-only nodes (CXL, HBM) cover a
  // CPU too, the node with the fewest CPUs that holds it, the lowest index on
  // a tie. Sized to the highest OS index + 1 (>= pus).
  std::vector<int> numa_of_cpu;
  // True when the CPUs of the host all map to one NUMA node (or nothing is
  // known): one NUMA node, or the others hold memory only. A VM that hides
  // its layout shows one NUMA node, so it is flat too.
  bool flat = true;
  // Why flat: "one NUMA node", "all CPUs on one NUMA node", or
  // "hwloc failed: ..."; empty when not flat.
  std::string reason;

  // One line, e.g. "1 package, 1 NUMA node, 2 cores, 2 PUs (flat: one NUMA
  // node)", or "layout unknown (flat: hwloc failed: ...)".
  std::string Describe() const;
};

// This machine's topology, loaded by hwloc on the first call (caches and I/O
// devices are not probed) and cached for the life of the process. Never
// fails: where hwloc cannot load, the result is flat with the reason.
// hwloc's own environment variables apply (e.g. HWLOC_XMLFILE=topo.xml
// loads a saved topology instead).
// THREAD SAFETY: safe from any thread; the reference stays valid forever.
const HostTopology& ThisHost();

// The topology of an hwloc synthetic description, e.g. "numa:2 core:2 pu:1"
// (2 NUMA nodes of 2 cores of 1 PU; PUs numbered 0..3 in order), as
// ThisHost() would describe such a machine. For tests, and meant for the
// `topology` key's future description of hosts. An invalid description gives
// a flat result whose reason says so. THREAD SAFETY: safe from any thread.
HostTopology DescribeSynthetic(const std::string& description);

// The NUMA node (as in numa_of_cpu) that all the CPUs of `cpus` share, a
// list as OwnCpus() (core/topology/placement.h) publishes it: "0,1",
// ranges "2-5,7" too. -1 where they span several nodes, where one of them is
// unknown to `host`, and for "-", "" or anything else that is not such a
// list (no spaces, signs, or descending ranges).
int NumaNodeOf(const std::string& cpus, const HostTopology& host);

}  // namespace hcomm

#endif  // HCOMM_CORE_TOPOLOGY_HOST_TOPOLOGY_H_
