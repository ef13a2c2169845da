// Which switch each rank hangs off (API.md "Topology"): a rank's own
// `switch_id` key, else its host's entry in the `topology` file
// (core/topology/topology.proto), else unknown. Rings order their ranks by
// switch, then host, so that a ring crosses each switch boundary once.
//
//   HCOMM_ASSIGN_OR_RETURN(std::string sw, SwitchOf(opts.switch_id, opts.topology, host));
//   std::vector<int> order = RingOrderBySwitch(switch_of_member, host_of_member);
#ifndef HCOMM_CORE_TOPOLOGY_SWITCHES_H_
#define HCOMM_CORE_TOPOLOGY_SWITCHES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hcomm {

// This rank's switch: `switch_id` if not empty, else the switch that the
// topology file at `topology_path` (if not empty) lists `host` under, else
// "" (unknown). InvalidArgument naming the file for one that cannot be read
// or parsed (with the line and column), a switch without a name, or a host
// listed under two switches.
absl::StatusOr<std::string> SwitchOf(const std::string& switch_id,
                                     const std::string& topology_path, const std::string& host);

// Members (by index) in the order a ring should visit them: grouped by
// switch (in order of each switch's lowest member), within a switch by
// host (likewise), within a host by NUMA node (`numa`, by member, -1
// unknown; empty: all unknown), then by index; so the ring crosses from one
// switch to another as many times as there are switches, and between hosts
// of a switch as many times as it has hosts. Empty where all members share
// one switch (or none is known): rank order then.
std::vector<int> RingOrderBySwitch(const std::vector<std::string>& switches,
                                   const std::vector<std::string>& hosts,
                                   const std::vector<int>& numa = {});

}  // namespace hcomm

#endif  // HCOMM_CORE_TOPOLOGY_SWITCHES_H_
