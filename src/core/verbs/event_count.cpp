#include "verbs/event_count.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

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
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return;
  uint64_t v;
  ssize_t r = ::read(fd_, &v, sizeof v);  // semaphore: one count
  (void)r;
}

bool EventCount::non_blocking() const noexcept { return (::fcntl(fd_, F_GETFL) & O_NONBLOCK) != 0; }

}  // namespace uroce::verbs
