#include "verbs/unmap_watch.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "common/log.hpp"
#include "common/quiet_thread.hpp"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

namespace uroce::verbs {
namespace {

UnmapWatch* g_made = nullptr;

uint64_t page_size() noexcept {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  return page;
}

std::pair<uint64_t, uint64_t> pages_of(uint64_t addr, uint64_t len) noexcept {
  const uint64_t p = page_size();
  const uint64_t end = addr + len < addr ? UINT64_MAX & ~(p - 1) : (addr + len + p - 1) & ~(p - 1);
  return {addr & ~(p - 1), end};
}

bool uffd_range(int fd, unsigned long op, uint64_t lo, uint64_t hi) noexcept {
  if (op == UFFDIO_REGISTER) {
    uffdio_register r{};
    r.range.start = lo;
    r.range.len = hi - lo;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    return ::ioctl(fd, UFFDIO_REGISTER, &r) == 0;
  }
  uffdio_range r{lo, hi - lo};
  return ::ioctl(fd, UFFDIO_UNREGISTER, &r) == 0;
}

}  // namespace

UnmapWatch& UnmapWatch::instance() noexcept {
  static UnmapWatch* w = [] {
    auto* made = new UnmapWatch();  // never destroyed: its thread runs until exit
    g_made = made;                  // for the fork handler, which must not wait on this initialisation
    ::pthread_atfork(nullptr, nullptr, [] { g_made->after_fork_in_child(); });
    return made;
  }();
  return *w;
}

void UnmapWatch::after_fork_in_child() noexcept {
  // Made anew, not locked around the fork: the parent's thread may have
  // held mu_ then.  What it guarded is the parent's: left behind unfreed.
  new (&mu_) std::mutex;
  new (&ranges_) decltype(ranges_)();
  new (&released_) decltype(released_)();
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  fd_ = wake_fd_ = -1;
  tried_ = false;
}

bool UnmapWatch::available() noexcept {
  std::lock_guard g(mu_);
  return open_locked();
}

bool UnmapWatch::open_locked() noexcept {
  if (tried_) return fd_ >= 0;
  tried_ = true;
  // Unprivileged processes may only ask for faults of user mode (Linux
  // 5.11+, vm.unprivileged_userfaultfd=0); we want no faults at all.
  int fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0 && errno == EINVAL) fd = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0) {
    UROCE_LOG(info, "unmap watch: no userfaultfd (%s): regions are not watched for unmapping", std::strerror(errno));
    return false;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMAP;
  if (::ioctl(fd, UFFDIO_API, &api) != 0) {
    UROCE_LOG(info, "unmap watch: UFFDIO_API refused the unmap events (%s)", std::strerror(errno));
    ::close(fd);
    return false;
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return false;
  }
  fd_ = fd;  // before the thread starts: it polls them
  wake_fd_ = wake;
  try {
    start_quiet_thread("uroce-unmap", [this] { run(); }).detach();  // none of the application's signals
  } catch (...) {
    fd_ = wake_fd_ = -1;
    ::close(fd);
    ::close(wake);
    return false;
  }
  return true;
}

bool UnmapWatch::watch(uint64_t addr, uint64_t len) noexcept {
  if (len == 0) return false;
  const auto [lo, hi] = pages_of(addr, len);
  std::lock_guard g(mu_);
  if (!open_locked()) return false;
  if (auto it = ranges_.find({lo, hi}); it != ranges_.end()) {  // registered already
    ++it->second;
    return true;
  }
  if (!uffd_range(fd_, UFFDIO_REGISTER, lo, hi)) {
    UROCE_LOG(debug, "unmap watch: cannot watch [0x%llx, 0x%llx): %s", (unsigned long long)lo, (unsigned long long)hi,
              std::strerror(errno));
    return false;
  }
  try {
    ranges_.emplace(std::make_pair(lo, hi), 1u);
  } catch (...) {
    uffd_range(fd_, UFFDIO_UNREGISTER, lo, hi);
    return false;
  }
  return true;
}

void UnmapWatch::unwatch(uint64_t addr, uint64_t len) noexcept {
  if (len == 0) return;
  const auto [lo, hi] = pages_of(addr, len);
  {
    std::lock_guard g(mu_);
    auto it = ranges_.find({lo, hi});
    if (it == ranges_.end()) return;
    if (--it->second > 0) return;  // other regions still watch these pages
    ranges_.erase(it);
    try {
      released_.emplace_back(lo, hi);
    } catch (...) {
      return;  // stays registered: a later munmap waits a moment for the thread, no more
    }
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

// Unregisters the parts of the released ranges that no watched range
// covers (any more), left to right.
void UnmapWatch::release_pending() noexcept {
  std::lock_guard g(mu_);
  for (const auto& [lo, hi] : released_) {
    std::vector<std::pair<uint64_t, uint64_t>> cover;
    for (const auto& [r, count] : ranges_) {
      if (r.first >= hi) break;  // ordered by start: none further covers
      if (r.second > lo) cover.emplace_back(std::max(r.first, lo), std::min(r.second, hi));
    }
    std::sort(cover.begin(), cover.end());
    uint64_t at = lo;
    for (const auto& c : cover) {
      if (c.first > at) uffd_range(fd_, UFFDIO_UNREGISTER, at, c.first);
      at = std::max(at, c.second);
    }
    if (at < hi) uffd_range(fd_, UFFDIO_UNREGISTER, at, hi);  // holes (already unmapped) are fine
  }
  released_.clear();
}

// Reading an event lets the unmapping thread go on, so events are read
// first; the handler may then find the MR table busy (held by a thread that
// is itself unmapping) and is retried every millisecond: never blocking
// here is what keeps an unmapping thread from waiting on us forever.
void UnmapWatch::run() noexcept {
  uffd_msg msgs[16];
  struct Unmapped {
    uint64_t lo, hi, stamp;
  };
  std::vector<Unmapped> pending;
  pending.reserve(64);  // no allocation while an unmapping thread may hold malloc's lock
  for (;;) {
    const Handler handler = handler_.load(std::memory_order_acquire);
    std::erase_if(pending, [handler](const Unmapped& u) { return !handler || handler(u.lo, u.hi, u.stamp); });
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, pending.empty() ? -1 : 1) < 0 && errno != EINTR) return;
    if (p[1].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
      release_pending();
    }
    if (!(p[0].revents & POLLIN)) continue;
    // Stamped before the read: the read lets the unmapping thread go on,
    // and a region it registers next (over new memory) must count as later.
    const Stamp stamp_of = stamp_.load(std::memory_order_acquire);
    const uint64_t stamp = stamp_of ? stamp_of() : 0;
    const ssize_t n = ::read(fd_, msgs, sizeof msgs);
    if (n <= 0) continue;  // EAGAIN: another reader, or nothing yet
    for (size_t i = 0; i < size_t(n) / sizeof(uffd_msg); ++i) {
      const uffd_msg& m = msgs[i];
      uint64_t lo = 0, hi = 0;
      if (m.event == UFFD_EVENT_UNMAP) {
        lo = m.arg.remove.start;
        hi = m.arg.remove.end;
      } else if (m.event == UFFD_EVENT_REMAP) {
        lo = m.arg.remap.from;
        hi = lo + m.arg.remap.len;
      } else {
        continue;
      }
      pending.push_back({lo, hi, stamp});
    }
  }
}

}  // namespace uroce::verbs
