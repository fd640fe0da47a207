// uroce::published_stats() over net/stats_file.
#include "uroce/stats.hpp"

#include "net/stats_file.hpp"

namespace uroce {

Result<std::vector<PublishedStats>> published_stats(int pid) {
  auto snaps = net::read_published_stats(pid ? std::optional<pid_t>(pid) : std::nullopt);
  if (!snaps.ok()) return snaps.status();
  std::vector<PublishedStats> out;
  for (auto& s : *snaps) {
    PublishedStats p;
    p.pid = s.pid;
    p.device = std::move(s.device);
    p.endpoint = std::move(s.endpoint);
    p.faults = std::move(s.faults);
    p.updated_unix_ns = s.updated_ns;
    for (auto& [name, value] : s.counters) p.counters.push_back(Counter{std::move(name), value});
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace uroce
