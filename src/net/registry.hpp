// HostRegistry: the host-wide table through which the uroce processes of one
// user coordinate without a daemon.
//
// A file (default <runtime_dir()>/registry, or $UROCE_REGISTRY), mode 0600, mapped MAP_SHARED by every process.  It
// holds
//  - a 16-byte random secret, made once by whichever process creates the file
//    (under flock, so creation is race-free);
//  - 1024 slots, 1..1023 handed out: each process claims one by a
//    compare-and-swap of (pid, start time) and keeps it until it exits.  A
//    slot whose owner is gone (no such pid, a zombie, or a different start
//    time: the pid was reused) is reclaimed by the next claimant.
//  - per slot, up to 8 published bindings (netns, IP, UDP port): the port a
//    process receives on for an IP, so that a same-host peer which could not
//    get port 4791 can still be reached.
//
// The transport builds QPNs as slot << 14 | index (unique on the host), and
// keys memory keys with the secret.
//
// The registry trusts only a file owned by this user with no group/other
// permissions, and does not follow symlinks.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "common/ip_addr.hpp"
#include "common/status.hpp"

namespace uroce::net {

namespace registry {
struct File;
}

class HostRegistry {
 public:
  static constexpr uint32_t kSlotBits = 10;  // slots 1..1023
  static constexpr uint32_t kMaxBindings = 8;

  // The process-wide registry at default_path(), opened on first use.  A
  // forked child gets its own (with its own slot) on its first call.  Its
  // slot is released at exit.
  static Result<std::shared_ptr<HostRegistry>> instance();
  // $UROCE_REGISTRY if set and non-empty, else <runtime_dir()>/registry (an
  // error if that directory is not ours alone: see runtime_dir.hpp).
  static Result<std::string> default_path();
  // Opens (creating if needed) the registry at `path` and claims a slot: each
  // call claims another one.  Mainly for tests; the NIC uses instance().
  static Result<std::shared_ptr<HostRegistry>> open(const std::string& path);

  HostRegistry(const HostRegistry&) = delete;
  HostRegistry& operator=(const HostRegistry&) = delete;
  ~HostRegistry();  // releases the slot (only in the process that claimed it)

  uint32_t slot() const noexcept { return slot_; }
  std::span<const uint8_t, 16> secret() const noexcept { return secret_; }
  const std::string& path() const noexcept { return path_; }

  // Announces that this process receives on (addr, port) in the calling
  // thread's network namespace; replaces the port of an earlier binding for
  // the same address.  ENOSPC when all kMaxBindings are in use.
  Status publish(const IpAddr& addr, uint16_t port);
  // Withdraws a binding; ENOENT if it was not published.
  Status unpublish(const IpAddr& addr, uint16_t port);

  // The UDP port the process holding `slot` receives on for `addr` in our
  // network namespace (a binding to the unspecified address of the same
  // family also matches).  nullopt if there is none or the holder is dead.
  // A few system calls (stat, kill, /proc/<pid>/stat): cache the answer.
  std::optional<uint16_t> lookup_port(uint32_t slot, const IpAddr& addr) const;

  // Whether a live process holds `slot`.
  bool alive(uint32_t slot) const;

  // Our owner word (pid and start time), and whether `slot` is still held,
  // by a live process, under that word: tables of other files (the CM's
  // listener table) tag their entries with it so that entries of a dead
  // process, or of an earlier holder of the slot, never count.
  uint64_t owner_word() const noexcept { return me_; }
  bool holds(uint32_t slot, uint64_t owner_word) const;

  // Gives the slot back now (the destructor and exit do it otherwise).
  // slot() keeps its value but the slot may go to another process.
  void release() noexcept;

 private:
  HostRegistry() = default;
  Status claim();
  bool owner_alive(uint64_t owner_word, uint64_t pidns) const;

  std::string path_;
  registry::File* file_ = nullptr;  // the mapping, unmapped by the destructor
  uint32_t slot_ = 0;
  uint64_t me_ = 0;     // our owner word (pid | start time)
  pid_t pid_ = 0;       // the process that claimed the slot
  uint64_t pidns_ = 0;  // inode of our pid namespace
  bool released_ = false;
  std::array<uint8_t, 16> secret_{};
  std::mutex write_mu_;  // serialises publish / unpublish / release
};

}  // namespace uroce::net
