#include "core/profile/trace.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace hcomm {
namespace {

// Microseconds, exact to the nanosecond.
double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

void Append(std::string* out, const nlohmann::json& event) {
  if (!out->empty()) out->append(",\n");
  out->append(event.dump());
}

}  // namespace

std::string TraceEvents(const Recorder::Contents& c, int rank, int64_t offset_ns,
                        int64_t epoch_ns) {
  std::string out;
  Append(&out, {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0},
                {"args", {{"name", absl::StrCat("rank ", rank)}}}});
  Append(&out, {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"tid", 0},
                {"args", {{"sort_index", rank}}}});
  std::map<int, std::string> track_names = c.track_names;
  // Nonblocking requests: the first lane free at each one's start, in the
  // order they started (so that no two spans of a lane overlap).
  std::vector<size_t> requests;
  for (size_t i = 0; i < c.spans.size(); ++i) {
    if (c.spans[i].track == kRequestTrack) requests.push_back(i);
  }
  std::sort(requests.begin(), requests.end(), [&c](size_t a, size_t b) {
    return c.spans[a].start_ns < c.spans[b].start_ns;
  });
  std::vector<int64_t> lane_end;
  std::map<size_t, int> lane_of;
  for (size_t i : requests) {
    const Span& s = c.spans[i];
    size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > s.start_ns) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(0);
    lane_end[lane] = s.end_ns;
    lane_of[i] = kFirstRequestLane + static_cast<int>(lane);
    track_names[lane_of[i]] = absl::StrCat("requests (lane ", lane + 1, ")");
  }
  for (const auto& [track, name] : track_names) {
    Append(&out, {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", track},
                  {"args", {{"name", name}}}});
    Append(&out, {{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", rank}, {"tid", track},
                  {"args", {{"sort_index", track}}}});
  }
  for (size_t i = 0; i < c.spans.size(); ++i) {
    const Span& s = c.spans[i];
    const int tid = s.track == kRequestTrack ? lane_of[i] : s.track;
    nlohmann::json args = {{"bytes", s.bytes}, {"comm", s.comm},
                           {"status", s.status == nullptr ? "ok" : s.status}};
    if (s.cat == SpanCat::kTask) {
      const bool named = s.task >= 0 && static_cast<size_t>(s.task) < c.names.size();
      args["task"] = named ? c.names[s.task] : std::string("?");
      args["priority"] = s.priority;
    } else {
      args["count"] = s.count;
      args["peer"] = s.peer;
      args["tag"] = s.tag;
      args["root"] = s.root;
      args["seq"] = s.seq;
      args["stream"] = s.stream;
      if (s.dtype != nullptr) args["dtype"] = s.dtype;
      if (s.redop != nullptr) args["op"] = s.redop;
      if (s.algo != nullptr) args["algo"] = s.algo;
      if (s.stream >= 0) args["priority"] = s.priority;
    }
    std::string name = s.name;
    if (s.cat == SpanCat::kTask) name = absl::StrCat("task ", args["task"].get<std::string>());
    Append(&out, {{"ph", "X"},
                  {"name", std::move(name)},
                  {"cat", SpanCatName(s.cat)},
                  {"pid", rank},
                  {"tid", tid},
                  {"ts", Us(s.start_ns + offset_ns - epoch_ns)},
                  {"dur", Us(s.end_ns - s.start_ns)},
                  {"args", std::move(args)}});
  }
  return out;
}

std::string TraceBegin() { return "{\"traceEvents\": [\n"; }

std::string TraceEnd(const TraceInfo& info) {
  nlohmann::json other = {{"format", "hcomm profile 1"},
                          {"nranks", info.nranks},
                          {"clock_error_us", info.clock_error_us},
                          {"dropped_events", info.dropped},
                          {"missing_ranks", info.missing},
                          {"file_written_by", "rank 0"}};
  return absl::StrCat("\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": ", other.dump(), "\n}\n");
}

}  // namespace hcomm
