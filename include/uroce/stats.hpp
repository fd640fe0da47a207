// The counters of every uroce device of this user on this host, as their
// processes published them (what `uroce stat` shows).
//
// Each NIC writes a snapshot of its counters to a shared-memory file
// (UROCE_STATS_DIR, default /dev/shm: uroce-<uid>-stats-<pid>-<device>) at
// most 100 ms after they change, and removes it when it closes;
// UROCE_STATS=0 turns this off.  docs/counters.md explains each counter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "uroce/device.hpp"
#include "uroce/status.hpp"

namespace uroce {

struct PublishedStats {
  int pid = 0;
  std::string device{};
  std::string endpoint{};        // "127.0.0.1:4791"
  std::string faults{};          // fault injection in effect, "" if none
  uint64_t updated_unix_ns = 0;  // when the snapshot was taken (0: none yet)
  std::vector<Counter> counters{};
};

// Snapshots of the live processes (of `pid` only if not 0).  Files left by
// processes that died are removed on the way.  An error only if the
// directory cannot be read.
Result<std::vector<PublishedStats>> published_stats(int pid = 0);

}  // namespace uroce
