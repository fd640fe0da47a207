// `uroce stat`: the counters of every running uroce device of this user
// (each NIC publishes them to shared memory, uroce/stats.hpp), like
// `rdma statistic` shows a kernel device's hw_counters.
//
//   uroce stat                  every device of every process, non-zero counters
//   uroce stat --pid 1234 --all one process, every counter
//   uroce stat --watch [2]      again every 2 s (default 1), with rates per second
//   uroce stat --json           one JSON object per device
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <thread>

#include "commands.hpp"
#include "uroce/stats.hpp"

namespace uroce::stat_tool {
namespace {

struct Options {
  int pid = 0;
  bool all = false;
  bool json = false;
  double watch = 0;  // seconds; 0: once
};

double age_s(uint64_t updated_ns) {
  if (!updated_ns) return -1;
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t now = uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
  return now > updated_ns ? double(now - updated_ns) / 1e9 : 0;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

using Key = std::pair<int, std::string>;                                           // pid, device
using Prev = std::map<Key, std::pair<std::map<std::string, uint64_t>, uint64_t>>;  // counters, time

void print(const PublishedStats& s, const Options& o, Prev& prev) {
  const Key key{s.pid, s.device};
  auto it = prev.find(key);
  const bool rates = o.watch > 0 && it != prev.end() && s.updated_unix_ns > it->second.second;
  const double dt = rates ? double(s.updated_unix_ns - it->second.second) / 1e9 : 0;
  if (o.json) {
    std::printf("{\"pid\": %d, \"device\": %s, \"endpoint\": %s, \"faults\": %s, \"updated_unix_ns\": %" PRIu64
                ", \"counters\": {",
                s.pid, json_str(s.device).c_str(), json_str(s.endpoint).c_str(), json_str(s.faults).c_str(),
                s.updated_unix_ns);
    bool first = true;
    for (const Counter& c : s.counters) {
      if (!o.all && c.value == 0) continue;
      std::printf("%s%s: %" PRIu64, first ? "" : ", ", json_str(c.name).c_str(), c.value);
      first = false;
    }
    std::printf("}}\n");
  } else {
    const double age = age_s(s.updated_unix_ns);
    std::printf("pid %d  %s  %s", s.pid, s.device.c_str(), s.endpoint.c_str());
    if (age < 0)
      std::printf("  (no snapshot yet)");
    else
      std::printf("  (as of %.1f s ago)", age);
    if (!s.faults.empty()) std::printf("\n  fault injection: %s", s.faults.c_str());
    std::printf("\n");
    int shown = 0;
    for (const Counter& c : s.counters) {
      if (!o.all && c.value == 0) continue;
      std::printf("  %-28s %16" PRIu64, c.name.c_str(), c.value);
      if (rates) {
        const auto p = it->second.first.find(c.name);
        const uint64_t before = p == it->second.first.end() ? 0 : p->second;
        std::printf("  %12.0f/s", double(c.value - before) / dt);
      }
      std::printf("\n");
      ++shown;
    }
    if (shown == 0) std::printf("  (all counters are zero)\n");
  }
  auto& slot = prev[key];
  for (const Counter& c : s.counters) slot.first[c.name] = c.value;
  slot.second = s.updated_unix_ns;
}

int run(const Options& o) {
  Prev prev;
  for (int round = 0;; ++round) {
    auto stats = published_stats(o.pid);
    if (!stats.ok()) {
      std::fprintf(stderr, "uroce stat: %s\n", stats.status().to_string().c_str());
      return 1;
    }
    if (o.watch > 0 && !o.json) std::printf("%s", round ? "\n" : "");
    if (stats->empty()) {
      if (o.pid)
        std::printf("uroce stat: process %d has no uroce device open (or has exited)\n", o.pid);
      else
        std::printf("uroce stat: no uroce device is running (no process of uid %u has published counters)\n",
                    unsigned(::geteuid()));
      if (o.watch <= 0) return o.pid ? 1 : 0;
    }
    for (const PublishedStats& s : *stats) print(s, o, prev);
    std::fflush(stdout);
    if (o.watch <= 0) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
  }
}

}  // namespace
}  // namespace uroce::stat_tool

namespace uroce::cli {

Command add_stat(CLI::App& root) {
  auto o = std::make_shared<stat_tool::Options>();
  Command c;
  c.app = root.add_subcommand("stat", "Show the NIC counters of the running uroce devices of this user");
  c.app->add_option("--pid", o->pid, "Only this process");
  c.app->add_flag("--all", o->all, "Show every counter, not only the non-zero ones");
  c.app->add_flag("--json", o->json, "One JSON object per device");
  c.app->add_option("--watch", o->watch, "Show them again every SECONDS (with rates per second)")
      ->expected(0, 1)
      ->default_str("1");
  c.app->footer(
      "Each uroce NIC writes its counters to a shared-memory file (UROCE_STATS_DIR, default the user's runtime "
      "directory) at\n"
      "most 100 ms after they change; UROCE_STATS=0 turns that off.  docs/counters.md explains them.");
  c.run = [o] {
    stat_tool::Options opt = *o;
    if (opt.watch < 0) opt.watch = 0;
    return stat_tool::run(opt);
  };
  return c;
}

}  // namespace uroce::cli
