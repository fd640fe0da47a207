// The counting eventfd behind an event queue (a context's async events, a
// completion channel): one count per queued event, so that the application
// can poll() it.  The queue adds and takes counts only under its own lock,
// which keeps the count equal to the queue's length: take() then always
// finds one and never blocks.
#pragma once

#include "common/status.hpp"

namespace uroce::verbs {

class EventCount {
 public:
  // Blocking by default, like rdma-core's event fds; the application may
  // set O_NONBLOCK on fd().
  static Result<EventCount> create(const char* what);
  EventCount(EventCount&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  EventCount& operator=(EventCount&&) = delete;
  EventCount(const EventCount&) = delete;
  ~EventCount();

  int fd() const noexcept { return fd_; }
  void add() noexcept;
  // Without a count to take (an application that read the fd itself), it
  // does nothing rather than block.
  void take() noexcept;
  // What a read() of the fd would do with nothing queued: true if the
  // application made the fd non-blocking (EAGAIN at once).
  bool non_blocking() const noexcept;

 private:
  explicit EventCount(int fd) noexcept : fd_(fd) {}
  int fd_;
};

}  // namespace uroce::verbs
