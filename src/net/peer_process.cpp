// Cross-memory attach to a same-host peer (peer_process.hpp).
#include "net/peer_process.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same on every architecture (Linux 5.3)
#endif

#include <algorithm>
#include <cerrno>
#include <string>

#include "net/proc_info.hpp"

namespace uroce::net {
namespace {

bool same_process(pid_t pid, uint64_t start) noexcept {
  const auto st = proc_stat(pid);
  return st && st->start == start && st->state != 'Z' && st->state != 'X';
}

std::string name(pid_t pid) { return "peer process " + std::to_string(pid); }

}  // namespace

Result<PeerProcess> PeerProcess::open(pid_t pid, uint64_t start) {
  if (pid <= 0) return err::inval("peer process: pid " + std::to_string(pid));
  const int fd = int(::syscall(SYS_pidfd_open, pid, 0));  // close-on-exec always
  if (fd < 0) {
    if (errno == ESRCH) return err::from_errno(ESRCH, name(pid) + " is gone");
    // Without pidfds (an old kernel, a seccomp filter), /proc tells; any
    // other failure (EMFILE, ...) is the caller's to see.
    if (errno != ENOSYS && errno != EPERM) return err::from_errno(errno, "holding " + name(pid) + " (pidfd_open)");
  }
  UniqueFd pidfd(fd);
  // Checked after the pidfd is taken: the pidfd then holds the process
  // whose start time matched, not one that got its pid since.
  if (!same_process(pid, start))
    return err::from_errno(ESRCH, name(pid) + " is gone (its pid now names another process, or none)");
  return PeerProcess(pid, start, std::move(pidfd));
}

bool PeerProcess::alive() const noexcept {
  if (pidfd_.valid()) {
    pollfd p{pidfd_.get(), POLLIN, 0};  // readable once the process exited (a zombie too)
    int r;
    do r = ::poll(&p, 1, 0);
    while (r < 0 && errno == EINTR);
    if (r >= 0) return r == 0;
  }
  return same_process(pid_, start_);
}

Result<size_t> PeerProcess::copy(bool to_peer, std::span<const iovec> local, std::span<const iovec> remote) const {
  if (local.size() > IOV_MAX || remote.size() > IOV_MAX)
    return err::inval(name(pid_) + ": a copy with " + std::to_string(std::max(local.size(), remote.size())) +
                      " ranges (at most " + std::to_string(IOV_MAX) + ")");
  if (!alive()) return err::from_errno(ESRCH, name(pid_) + " is gone");
  const ssize_t n = to_peer ? ::process_vm_writev(pid_, local.data(), local.size(), remote.data(), remote.size(), 0)
                            : ::process_vm_readv(pid_, local.data(), local.size(), remote.data(), remote.size(), 0);
  const int e = errno;
  // A peer that exited during the copy may have lost its pid to another
  // process before the copy reached it.
  if (!alive()) return err::from_errno(ESRCH, name(pid_) + " went away during the copy");
  if (n < 0) {
    const char* what = to_peer ? "writing to " : "reading from ";
    switch (e) {
      case EFAULT: return err::from_errno(EFAULT, std::string(what) + name(pid_) + ": the first byte faulted");
      case EPERM: return err::perm(std::string(what) + name(pid_) + ": refused (ptrace rules, Yama, seccomp)");
      default: return err::from_errno(e, std::string(what) + name(pid_));
    }
  }
  return size_t(n);
}

Result<size_t> PeerProcess::read(std::span<const iovec> local, std::span<const iovec> remote) const {
  return copy(false, local, remote);
}

Result<size_t> PeerProcess::write(std::span<const iovec> local, std::span<const iovec> remote) const {
  return copy(true, local, remote);
}

bool cross_memory_attach_works() noexcept {
  static const bool works = [] {
    // A copy from ourselves: the calls exist and no seccomp filter refuses
    // them (ENOSYS, EPERM).
    static const uint64_t word = 0x75726f6365212121ull;  // any known word
    uint64_t got = 0;
    iovec local{&got, sizeof got};
    iovec remote{const_cast<uint64_t*>(&word), sizeof got};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == ssize_t(sizeof got) && got == word;
  }();
  return works;
}

namespace {

// The first 16 KiB of a small file (/proc), if it can be read.
std::optional<std::string> read_small_file(const char* path) noexcept {
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string out(16384, '\0');
  size_t got = 0;
  for (ssize_t n; got < out.size() && (n = ::read(fd.get(), out.data() + got, out.size() - got)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    got += size_t(n);
  }
  out.resize(got);
  return out;
}

}  // namespace

bool cross_memory_attach_by_default(std::string_view status, std::optional<std::string_view> yama_scope) noexcept {
  // "Seccomp:\t0": no filter (1: strict mode, 2: filters).
  const size_t at = status.find("\nSeccomp:");
  if (at == std::string_view::npos) return false;  // (an unreadable status: assume the worst)
  std::string_view mode = status.substr(at + 9);
  while (!mode.empty() && (mode.front() == ' ' || mode.front() == '\t')) mode.remove_prefix(1);
  if (mode.empty() || mode.front() != '0') return false;
  if (!yama_scope) return true;
  std::string_view y = *yama_scope;
  while (!y.empty() && (y.back() == '\n' || y.back() == ' ')) y.remove_suffix(1);
  return y == "0";
}

bool cross_memory_attach_by_default() noexcept {
  static const bool ok = [] {
    const std::optional<std::string> status = read_small_file("/proc/self/status");
    const std::optional<std::string> yama = read_small_file("/proc/sys/kernel/yama/ptrace_scope");
    if (!status) return false;
    return cross_memory_attach_by_default(*status, yama ? std::optional<std::string_view>(*yama) : std::nullopt);
  }();
  return ok;
}

}  // namespace uroce::net
