// PeerProcess: a uroce process of this host whose memory we may copy to and
// from in one pass: cross-memory attach (process_vm_readv / process_vm_writev), the
// kernel's part of the one-copy path between same-host peers
// (docs/one_copy_design.md).
//
// The kernel allows it as it allows ptrace: the same user (real ids) or
// CAP_SYS_PTRACE, a dumpable target, and under Yama's scope 1 only a
// descendant or a process the target named.  A fault on either side ends a
// copy early, never with a signal: read() and write() then return the bytes
// copied so far (a count that may stop inside one range), or EFAULT if not
// even the first byte moved.
//
// The peer is named by pid, which the kernel may give to another process
// once the peer is gone.  open() checks the start time the host registry
// recorded for it, and holds a pidfd; a copy made while the pidfd says the
// peer lives went to the peer.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/status.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {

class PeerProcess {
 public:
  // Process `pid` of our pid namespace (the caller makes sure: the host
  // registry records each slot's) if it is the one started at `start`
  // (clock ticks after boot, field 22 of /proc/<pid>/stat): ESRCH if it is
  // gone or its pid now names another process; the errno of pidfd_open()
  // (EMFILE, ...) if it could not be held.
  static Result<PeerProcess> open(pid_t pid, uint64_t start);

  pid_t pid() const noexcept { return pid_; }
  // Whether it still runs (not exited, not a zombie).
  bool alive() const noexcept;

  // Copies the peer's `remote` ranges into our `local` ones (read) or ours
  // into its (write), in order, as one stream of bytes: the count copied.
  // EFAULT if a fault stopped it before the first byte; EPERM if the kernel
  // refuses us this peer (see above), ENOSYS without the calls; ESRCH if the
  // peer is gone, also when it went during the copy (which may then have
  // gone elsewhere: the caller must not trust what it read).  At most
  // IOV_MAX ranges a side (EINVAL).
  Result<size_t> read(std::span<const iovec> local, std::span<const iovec> remote) const;
  Result<size_t> write(std::span<const iovec> local, std::span<const iovec> remote) const;

 private:
  PeerProcess(pid_t pid, uint64_t start, UniqueFd pidfd) noexcept
      : pid_(pid), start_(start), pidfd_(std::move(pidfd)) {}
  Result<size_t> copy(bool to_peer, std::span<const iovec> local, std::span<const iovec> remote) const;

  pid_t pid_;
  uint64_t start_;
  UniqueFd pidfd_;  // invalid where pidfd_open() is missing (before 5.3) or refused: /proc then
};

// Whether the kernel lets this process use cross-memory attach at all,
// asked once per process with a copy from itself (as UCX does): false
// without the calls or under a seccomp filter that refuses them.  A filter
// that kills instead kills the caller, so only an opted-in path asks.
// Whether a given peer may be reached (ptrace rules, Yama) shows only at
// the first copy: EPERM.
bool cross_memory_attach_works() noexcept;

// Whether the one-copy path may be on without being asked for: no seccomp
// filter governs this process (one that kills would kill it at the probe
// above; Docker's, which refuses, leaves the path off too) and Yama lets
// a process reach its user's other processes (ptrace_scope 0, or no Yama:
// with 1, every peer would refuse the first copy of each QP).  Read from
// /proc/self/status and /proc/sys/kernel/yama/ptrace_scope.
bool cross_memory_attach_by_default() noexcept;
// The rule itself: `status` as /proc/self/status reads, `yama_scope` the
// file's content (nullopt: no such file).
bool cross_memory_attach_by_default(std::string_view status, std::optional<std::string_view> yama_scope) noexcept;

}  // namespace uroce::net
