#include "core/topology/switches.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "core/topology/topology.pb.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace hcomm {
namespace {

// Keeps the first parse error, with its place.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

}  // namespace

absl::StatusOr<std::string> SwitchOf(const std::string& switch_id,
                                     const std::string& topology_path, const std::string& host) {
  if (!switch_id.empty()) return switch_id;
  if (topology_path.empty()) return std::string();
  std::ifstream in(topology_path);
  if (!in) {
    return InvalidArgument(absl::StrCat("topology='", topology_path, "': cannot read the file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  topology::Topology t;
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text.str(), &t)) {
    return InvalidArgument(absl::StrCat("topology='", topology_path, "': ", errors.error(),
                                        " (docs/topology.md shows the format)"));
  }
  std::map<std::string, std::string> switch_of;
  for (const topology::Switch& s : t.switches()) {
    if (s.name().empty()) {
      return InvalidArgument(
          absl::StrCat("topology='", topology_path, "': a switch without a name"));
    }
    for (const std::string& h : s.hosts()) {
      auto [it, fresh] = switch_of.emplace(h, s.name());
      if (!fresh && it->second != s.name()) {
        return InvalidArgument(absl::StrCat("topology='", topology_path, "': host '", h,
                                            "' is under two switches, '", it->second, "' and '",
                                            s.name(), "'"));
      }
    }
  }
  auto it = switch_of.find(host);
  return it == switch_of.end() ? std::string() : it->second;
}

std::vector<int> RingOrderBySwitch(const std::vector<std::string>& switches,
                                   const std::vector<std::string>& hosts,
                                   const std::vector<int>& numa) {
  const int n = static_cast<int>(switches.size());
  if (std::set<std::string>(switches.begin(), switches.end()).size() < 2) return {};
  // Each switch, and each host, ranks by its first member.
  std::map<std::string, int> switch_first, host_first;
  for (int i = 0; i < n; ++i) {
    switch_first.emplace(switches[i], i);
    host_first.emplace(hosts[i], i);
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int sa = switch_first[switches[a]], sb = switch_first[switches[b]];
    if (sa != sb) return sa < sb;
    const int ha = host_first[hosts[a]], hb = host_first[hosts[b]];
    if (ha != hb || numa.empty()) return ha < hb;
    return numa[a] < numa[b];
  });
  return order;
}

}  // namespace hcomm
