// Counters published for other processes: each NIC keeps a small
// shared-memory file with a snapshot of its counters, which `uroce stat`
// (and uroce::published_stats()) read.
//
//   <dir>/uroce-<uid>-stats-<pid>-<device>      dir: UROCE_STATS_DIR, default /dev/shm
//
// Layout (host byte order, version 1): a fixed header, then `count` names of
// kNameLen bytes (NUL-padded), then `count` 64-bit values.  The names are
// written once; the values are updated under a sequence lock (seq is odd
// while a snapshot is being written).  The owner unlinks the file when the
// NIC goes away; a reader removes the files of processes that are gone
// (pid and start time, so a reused pid is not mistaken for the owner).
// UROCE_STATS=0 turns publishing off.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.hpp"

namespace uroce::net {

namespace stats_file {
inline constexpr char kMagic[8] = {'U', 'R', 'O', 'C', 'E', 'S', 'T', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kNameLen = 48;

struct Header {
  alignas(8) char magic[8];  // written last (atomically, as one 64-bit word)
  uint32_t version;
  uint32_t count;  // counters
  int32_t pid;
  uint32_t reserved;
  uint64_t start_time;               // /proc/<pid>/stat field 22 of the owner
  char device[64];                   // NUL-terminated
  char endpoint[64];                 // "127.0.0.1:4791"
  char faults[256];                  // fault injection in effect ("" if none)
  std::atomic<uint64_t> seq;         // odd while the values are being written
  std::atomic<uint64_t> updated_ns;  // CLOCK_REALTIME of the last snapshot
  std::atomic<uint64_t> published;   // snapshots written so far
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
}  // namespace stats_file

// The directory stats files live in: UROCE_STATS_DIR, default runtime_dir()
// (an error if that is not ours alone).
Result<std::string> stats_dir();
// False if UROCE_STATS=0.
bool stats_enabled();

class StatsPublisher {
 public:
  struct Identity {
    std::string device;
    std::string endpoint;
    std::string faults;
  };
  // Creates the file with these counter names (values 0).
  static Result<std::unique_ptr<StatsPublisher>> create(const Identity& id, std::span<const std::string_view> names);
  ~StatsPublisher();
  StatsPublisher(const StatsPublisher&) = delete;
  StatsPublisher& operator=(const StatsPublisher&) = delete;

  // Writes a snapshot; values.size() must be the count given to create().
  void publish(std::span<const uint64_t> values) noexcept;
  const std::string& path() const noexcept { return path_; }

 private:
  StatsPublisher() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint32_t count_ = 0;
};

struct StatsSnapshot {
  pid_t pid = 0;
  std::string device, endpoint, faults, path;
  uint64_t updated_ns = 0;  // CLOCK_REALTIME, 0 if never published
  uint64_t published = 0;
  std::vector<std::pair<std::string, uint64_t>> counters;
};

// Every live publisher's snapshot (of one pid if given), sorted by pid and
// device.  Files of dead processes are removed on the way.
Result<std::vector<StatsSnapshot>> read_published_stats(std::optional<pid_t> pid = std::nullopt);

}  // namespace uroce::net
