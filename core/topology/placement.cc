#include "core/topology/placement.h"

#include <sched.h>

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace hcomm {

std::string OwnCpus() {
  std::vector<int> mine;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &cpus)) mine.push_back(c);
    }
  }
  return mine.empty() ? "-" : absl::StrJoin(mine, ",");
}

namespace {

// The ranks placed on `host` and the CPUs they may use together.
std::pair<int, int> RanksAndCpus(const std::vector<Placement>& ranks, const std::string& host) {
  int local_ranks = 0;
  std::set<int> host_cpus;
  for (const Placement& p : ranks) {
    if (p.host != host) continue;
    ++local_ranks;
    for (absl::string_view c : absl::StrSplit(p.cpus, ',', absl::SkipEmpty())) {
      int cpu = 0;
      if (absl::SimpleAtoi(c, &cpu)) host_cpus.insert(cpu);
    }
  }
  return {local_ranks, std::max<int>(1, static_cast<int>(host_cpus.size()))};
}

}  // namespace

bool CpusShared(const std::vector<Placement>& ranks, const std::string& host) {
  const auto [local_ranks, cpus] = RanksAndCpus(ranks, host);
  return local_ranks > cpus;
}

bool CpusFilled(const std::vector<Placement>& ranks, const std::string& host) {
  const auto [local_ranks, cpus] = RanksAndCpus(ranks, host);
  return local_ranks >= cpus;
}

}  // namespace hcomm
