#include "core/topology/host_topology.h"

#include <errno.h>
#include <hwloc.h>
#include <string.h>

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hcomm {
namespace {

// A CPU number above this in a list is garbage, not a CPU: it bounds the work
// of parsing "0-4000000000" (Linux's NR_CPUS tops out at 8192).
constexpr long kMaxCpu = 1 << 20;

// Destroys an hwloc topology when it goes out of scope.
class TopologyOwner {
 public:
  explicit TopologyOwner(hwloc_topology_t topo) : topo_(topo) {}
  ~TopologyOwner() { hwloc_topology_destroy(topo_); }
  TopologyOwner(const TopologyOwner&) = delete;
  TopologyOwner& operator=(const TopologyOwner&) = delete;

 private:
  hwloc_topology_t topo_;
};

HostTopology Failed(const std::string& why) {
  HostTopology host;
  host.flat = true;
  host.reason = absl::StrCat("hwloc failed: ", why);
  return host;
}

int Count(hwloc_topology_t topo, hwloc_obj_type_t type) {
  // -1 where objects of the type sit at several depths (not for these).
  return std::max(0, hwloc_get_nbobjs_by_type(topo, type));
}

// Reads what HostTopology holds out of a loaded topology.
HostTopology Summarise(hwloc_topology_t topo) {
  HostTopology host;
  host.packages = Count(topo, HWLOC_OBJ_PACKAGE);
  host.numa_nodes = Count(topo, HWLOC_OBJ_NUMANODE);
  host.cores = Count(topo, HWLOC_OBJ_CORE);
  host.pus = Count(topo, HWLOC_OBJ_PU);

  const int last = hwloc_bitmap_last(hwloc_topology_get_topology_cpuset(topo));
  if (last >= 0 && last <= kMaxCpu) host.numa_of_cpu.assign(last + 1, -1);
  // A memory-only node (CXL, HBM) has the cpuset of the object it hangs off,
  // so it covers CPUs that a node of their own covers too: the smallest
  // covering node is the local one.
  std::vector<int> covered_by(host.numa_of_cpu.size(), 0);
  for (int i = 0; i < host.numa_nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    if (node == nullptr || node->cpuset == nullptr) continue;
    const int size = hwloc_bitmap_weight(node->cpuset);
    if (size <= 0) continue;  // no CPU, or an infinite set
    unsigned cpu;
    hwloc_bitmap_foreach_begin(cpu, node->cpuset) {
      if (cpu < host.numa_of_cpu.size() && (host.numa_of_cpu[cpu] < 0 || size < covered_by[cpu])) {
        host.numa_of_cpu[cpu] = static_cast<int>(node->logical_index);
        covered_by[cpu] = size;
      }
    }
    hwloc_bitmap_foreach_end();
  }

  std::set<int> nodes_with_cpus;
  for (int node : host.numa_of_cpu) {
    if (node >= 0) nodes_with_cpus.insert(node);
  }
  host.flat = nodes_with_cpus.size() <= 1;
  if (!host.flat) {
    // Several nodes have CPUs of their own: reason stays empty.
  } else if (host.numa_nodes <= 1) {
    host.reason = "one NUMA node";
  } else if (!nodes_with_cpus.empty()) {
    host.reason = "all CPUs on one NUMA node";
  } else {
    host.reason = "no CPU on any NUMA node";
  }
  return host;
}

// Loads this machine (synthetic == nullptr) or a synthetic description.
HostTopology Load(const std::string* synthetic) {
  // A libhwloc of another major API than the headers would misread them.
  const unsigned runtime_api = hwloc_get_api_version();
  if ((runtime_api >> 16) != (HWLOC_API_VERSION >> 16)) {
    return Failed(absl::StrFormat("libhwloc has API %#x, hcomm was built for %#x", runtime_api,
                                  static_cast<unsigned>(HWLOC_API_VERSION)));
  }
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    return Failed(absl::StrCat("hwloc_topology_init: ", strerror(errno)));
  }
  TopologyOwner owner(topo);
  if (synthetic != nullptr) {
    if (hwloc_topology_set_synthetic(topo, synthetic->c_str()) != 0) {
      return Failed(absl::StrCat("invalid synthetic topology \"", *synthetic, "\""));
    }
  } else {
    // The whole host, not only the CPUs of this process's cgroup: other
    // ranks of the host may sit in other cgroups.
    hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  }
  // Nothing here needs caches; skipping them saves reading a few sysfs files
  // per CPU. I/O devices are off by default.
  hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  if (hwloc_topology_load(topo) != 0) {
    return Failed(absl::StrCat("hwloc_topology_load: ", strerror(errno)));
  }
  return Summarise(topo);
}

std::string Counted(int n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

bool IsDigit(const char* p, const char* end) { return p < end && *p >= '0' && *p <= '9'; }

// Reads a CPU number at `*p` (digits only, before `end`); false if there is
// none or it is above kMaxCpu.
bool ReadCpu(const char** p, const char* end, long* cpu) {
  const char* s = *p;
  if (!IsDigit(s, end)) return false;
  long value = 0;
  for (; IsDigit(s, end); ++s) {
    value = value * 10 + (*s - '0');
    if (value > kMaxCpu) return false;
  }
  *p = s;
  *cpu = value;
  return true;
}

}  // namespace

std::string HostTopology::Describe() const {
  const std::string flat_part = flat ? absl::StrCat(" (flat: ", reason, ")") : "";
  if (pus == 0 && numa_nodes == 0) return absl::StrCat("layout unknown", flat_part);
  return absl::StrCat(Counted(packages, "package", "packages"), ", ",
                      Counted(numa_nodes, "NUMA node", "NUMA nodes"), ", ",
                      Counted(cores, "core", "cores"), ", ", Counted(pus, "PU", "PUs"), flat_part);
}

const HostTopology& ThisHost() {
  // A function-local static: loaded once, thread-safe, never destroyed.
  static const HostTopology* const host = new HostTopology(Load(nullptr));
  return *host;
}

HostTopology DescribeSynthetic(const std::string& description) { return Load(&description); }

int NumaNodeOf(const std::string& cpus, const HostTopology& host) {
  // Strict "N" or "N-M" items separated by single commas; hwloc's own
  // hwloc_bitmap_list_sscanf would take "0x1", octal "010", " 1", "3-"
  // (up to infinity) and "5-2" (nothing) as CPU lists.
  const long known = static_cast<long>(host.numa_of_cpu.size());
  int node = -1;
  const char* p = cpus.data();
  const char* const end = p + cpus.size();
  while (true) {
    long first = 0, last = 0;
    if (!ReadCpu(&p, end, &first)) return -1;
    last = first;
    if (p < end && *p == '-') {
      ++p;
      if (!ReadCpu(&p, end, &last) || last < first) return -1;
    }
    if (last >= known) return -1;  // a CPU this host does not know
    for (long cpu = first; cpu <= last; ++cpu) {
      const int of = host.numa_of_cpu[cpu];
      if (of < 0 || (node >= 0 && of != node)) return -1;
      node = of;
    }
    if (p == end) return node;
    if (*p != ',') return -1;
    ++p;
  }
}

}  // namespace hcomm
