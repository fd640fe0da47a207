#include "verbs/event_count.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>

namespace uroce::verbs {

Result<EventCount> EventCount::create(const char* what) {
  const int fd = ::eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return err::from_errno(errno, std::string("eventfd for ") + what);
  return EventCount(fd);
}

EventCount::~EventCount() {
  if (fd_ >= 0) ::close(fd_);
}

void EventCount::add() noexcept {
  const uint64_t one = 1;
  ssize_t r = ::write(fd_, &one, sizeof one);
  (void)r;
}

void EventCount::take() noexcept {
  uint64_t v;  // (a semaphore: one count a read)
  // One system call where the kernel reads an eventfd without waiting when
  // asked to (Linux 5.12 on); before, a poll() first.
  static std::atomic<bool> nowait_refused{false};
  if (!nowait_refused.load(std::memory_order_relaxed)) {
    iovec io{&v, sizeof v};
    if (::preadv2(fd_, &io, 1, -1, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP) return;  // (EAGAIN: none)
    nowait_refused.store(true, std::memory_order_relaxed);
  }
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return;
  ssize_t r = ::read(fd_, &v, sizeof v);
  (void)r;
}

bool EventCount::non_blocking() const noexcept { return (::fcntl(fd_, F_GETFL) & O_NONBLOCK) != 0; }

}  // namespace uroce::verbs
