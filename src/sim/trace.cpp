#include "meshcast/sim/trace.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshcast/version.h"

namespace meshcast {

nlohmann::json chrome_trace(const Plan& plan, const Cluster& cluster, const SimResult& result) {
  using nlohmann::json;
  json events = json::array();
  // Names of the host processes and device threads, so tracks read "host 1 / dev 5".
  for (int h = 0; h < cluster.hosts; ++h) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", h},
                      {"args", {{"name", fmt::format("host {}", h)}}}});
    for (int l = 0; l < cluster.devices_per_host; ++l)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", h},
                        {"tid", l},
                        {"args", {{"name", fmt::format("dev {}", cluster.device_id(h, l))}}}});
  }
  constexpr double kMicro = 1e6;  // trace times are microseconds
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    const OpTiming& t = result.ops[i];
    std::vector<DeviceId> devices = op.receivers;
    if (op.sender && std::find(devices.begin(), devices.end(), *op.sender) == devices.end())
      devices.insert(devices.begin(), *op.sender);
    const json args = {{"op", op.id},
                       {"bytes", op.bytes},
                       {"sender", op.sender ? json(*op.sender) : json(nullptr)},
                       {"receivers", op.receivers}};
    for (DeviceId d : devices)
      events.push_back({{"ph", "X"},
                        {"name", fmt::format("{} {}", to_string(op.kind), op.id)},
                        {"cat", to_string(op.kind)},
                        {"pid", cluster.host_of(d)},
                        {"tid", cluster.local_of(d)},
                        {"ts", t.start_s * kMicro},
                        {"dur", (t.end_s - t.start_s) * kMicro},
                        {"args", args}});
  }
  // Device links are left out: NICs are what the strategies compete for.
  for (const LinkRateSample& s : result.link_rates) {
    const LinkStats& link = result.links[s.link];
    if (link.host < 0) continue;
    events.push_back({{"ph", "C"},
                      {"name", link.name.substr(link.name.find('.') + 1)},  // "nic0.out"
                      {"pid", link.host},
                      {"ts", s.time_s * kMicro},
                      {"args", {{"Gbps", bytes_to_gbps(s.bytes_per_s)}}}});
  }
  return {{"meshcast_version", kVersion}, {"displayTimeUnit", "ms"}, {"traceEvents", events}};
}

}  // namespace meshcast
