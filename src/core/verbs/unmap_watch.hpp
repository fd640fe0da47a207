// UnmapWatch: tells the MR table when the application unmaps (or moves with
// mremap) memory it registered.
//
// A NIC pins registered pages: after munmap the region still reaches the old
// pages, never whatever is mapped at the address next.  uroce pins nothing;
// the fault guard (common/fault_guard.hpp) stops a crash on memory that is
// gone, but once something new is mapped at the address a peer with the old
// rkey would read or write the new mapping.  So each region's pages are
// registered with a userfaultfd in write-protect mode (which never traps on
// its own: uroce write-protects nothing) asking only for the UNMAP and REMAP
// events.  The kernel then reports every munmap/mremap of those pages,
// holding the unmapping thread until the event is read; a thread of ours
// reads it and marks the regions over those pages gone, so that every later
// access through them fails (REM_ACCESS_ERR for a peer, LOC_PROT_ERR
// locally) whatever is mapped there afterwards.
//
// Best effort where the kernel refuses: no userfaultfd (before Linux 5.11
// without privilege, or a seccomp filter such as Docker's default) or pages
// it cannot watch (file-backed private mappings; shared memory and huge
// pages without the kernel's WP support) leave a region unwatched: it is
// then still guarded against faults but not against a new mapping.
// On-demand (ODP) regions are never watched: like a NIC's ODP, they follow
// whatever is mapped at their addresses.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace uroce::verbs {

class UnmapWatch {
 public:
  // Called from the watch's thread with each unmapped (or moved away)
  // page-aligned range [lo, hi), and what `Stamp` returned when the event
  // was read (the unmapping thread was still held then): regions made later
  // are over new memory.  It must not block on a lock an application thread
  // may hold while it unmaps memory: it returns false instead, and is
  // called again a millisecond later.
  using Stamp = uint64_t (*)() noexcept;
  using Handler = bool (*)(uint64_t lo, uint64_t hi, uint64_t stamp) noexcept;

  // The process's watch; its userfaultfd and thread start with the first
  // watched range.
  static UnmapWatch& instance() noexcept;

  void set_handler(Stamp s, Handler h) noexcept {
    stamp_.store(s, std::memory_order_release);
    handler_.store(h, std::memory_order_release);
  }
  // Watches the pages of [addr, addr + len): false if they cannot be watched.
  bool watch(uint64_t addr, uint64_t len) noexcept;
  // Stops watching the pages of [addr, addr + len) that no other watched
  // range (each watch() counts) still covers.  Done by the watch's thread,
  // soon after: unregistering write-protected pages walks their page tables
  // (about 7 ms per touched GiB), which deregistration should not wait for.
  void unwatch(uint64_t addr, uint64_t len) noexcept;
  // Whether the kernel gave us a userfaultfd with the events we need.
  bool available() noexcept;

 private:
  UnmapWatch() = default;
  // In a forked child: the userfaultfd is the parent's (its ioctls act on
  // the parent's memory) and its thread is not there; the child's first
  // watch() opens its own.
  void after_fork_in_child() noexcept;
  bool open_locked() noexcept;
  void run() noexcept;
  void release_pending() noexcept;
  std::mutex mu_;  // the fds' set-up, ranges_ and released_; never held while blocking
  int fd_ = -1;
  int wake_fd_ = -1;                                     // eventfd: ranges were released
  std::vector<std::pair<uint64_t, uint64_t>> released_;  // by unwatch(), for the thread
  bool tried_ = false;
  // Page-aligned ranges watched, each with the number of watch() calls for
  // it (many regions over the same pages are common: one registration).
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> ranges_;
  std::atomic<Stamp> stamp_{nullptr};
  std::atomic<Handler> handler_{nullptr};
};

}  // namespace uroce::verbs
