// Event channels and events: rdma_create_event_channel,
// rdma_destroy_event_channel, rdma_get_cm_event, rdma_ack_cm_event,
// rdma_migrate_id, rdma_event_str.
//
// A channel's fd is an eventfd whose counter is non-zero exactly while the
// queue holds events (kept so under the channel's lock), so poll() on it
// works and a blocking rdma_get_cm_event sleeps in poll(); the fd itself is
// blocking unless the application sets O_NONBLOCK, which we then honour.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "rdmacm.hpp"

namespace uroce::rdmacm {

namespace {

// Channels are never freed: a thread of the application may still be
// blocked in rdma_get_cm_event on one it destroys (rping does exactly
// that).  Retired ones are kept here (reachable, so not a leak).
std::mutex g_retired_mu;
std::vector<Channel*>& retired() {
  static auto* v = new std::vector<Channel*>;
  return *v;
}

void signal(Channel& ch) noexcept {
  const uint64_t one = 1;
  ssize_t r = ::write(ch.ch.fd, &one, sizeof one);
  (void)r;
}

void drain(Channel& ch) noexcept {
  uint64_t v;
  // Only called while the counter is non-zero: never blocks.
  ssize_t r = ::read(ch.ch.fd, &v, sizeof v);
  (void)r;
}

}  // namespace

Channel* new_channel(bool internal) noexcept {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* ch = new Channel{};
  ch->ch.fd = fd;
  ch->internal = internal;
  return ch;
}

void push_event(Channel& ch, EventBox* box) noexcept {
  std::lock_guard g(ch.mu);
  if (ch.queue.empty()) signal(ch);
  ch.queue.push_back(box);
}

std::vector<EventBox*> take_events(Channel& ch, const CmId* id) noexcept {
  std::vector<EventBox*> out;
  std::lock_guard g(ch.mu);
  const bool had = !ch.queue.empty();
  for (auto it = ch.queue.begin(); it != ch.queue.end();) {
    if (to_cm((*it)->ev.id) == id || (*it)->owner == id) {
      out.push_back(*it);
      it = ch.queue.erase(it);
    } else {
      ++it;
    }
  }
  if (had && ch.queue.empty()) drain(ch);
  return out;
}

void retire_channel(Channel* ch) noexcept {
  {
    std::lock_guard g(ch->mu);
    for (EventBox* b : ch->queue) delete b;
    ch->queue.clear();
    if (ch->ch.fd >= 0) {
      const int fl = ::fcntl(ch->ch.fd, F_GETFL);
      ch->was_nonblocking = fl >= 0 && (fl & O_NONBLOCK);
      ::close(ch->ch.fd);
    }
    ch->ch.fd = -1;
    ch->destroyed_by = std::this_thread::get_id();
  }
  std::lock_guard g(g_retired_mu);
  retired().push_back(ch);
}

// Takes the next event of `ch`, blocking unless its fd is non-blocking.
static int next_event(Channel& ch, rdma_cm_event** event) noexcept {
  for (bool entering = true;; entering = false) {
    int fd;  // read under the lock: another thread may destroy the channel meanwhile
    {
      std::lock_guard g(ch.mu);
      if (!ch.queue.empty()) {
        EventBox* box = ch.queue.front();
        ch.queue.pop_front();
        if (ch.queue.empty()) drain(ch);
        {
          std::lock_guard og(box->owner->mu);
          ++box->owner->outstanding;
        }
        *event = &box->ev;
        return 0;
      }
      // Called after this thread destroyed the channel, a plain misuse, or
      // on a non-blocking one, where no call ever waits: as read() of the
      // closed fd.
      if (ch.ch.fd < 0 && entering && (ch.was_nonblocking || ch.destroyed_by == std::this_thread::get_id()))
        return fail("rdma_get_cm_event", EBADF, "the channel was destroyed");
      fd = ch.ch.fd;
    }
    if (fd < 0) {
      // Destroyed by another thread while we waited, or just before we
      // came in (rping's CM thread loops back into this call as main tears
      // down).  A read() blocked in the kernel's rdma_cm stays blocked
      // then: the file lives until it returns, and no event comes.  So does
      // this call, until the process ends; an error made rping exit 255
      // after a clean run -- and whether the thread got in before the
      // teardown is only a matter of scheduling.
      UROCE_LOG(debug,
                "rdma_get_cm_event: channel destroyed by another thread; waiting for good, as a read() "
                "blocked in the kernel's rdma_cm would");
      for (;;) ::pause();
    }
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
      errno = EAGAIN;
      return -1;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return fail("rdma_get_cm_event", errno, "poll failed");
  }
}

int wait_event(CmId& id) noexcept {
  if (!id.sync) return 0;
  if (id.id.event) {
    rdma_ack_cm_event(id.id.event);
    id.id.event = nullptr;
  }
  rdma_cm_event* ev;
  if (next_event(*id.chan, &ev) != 0) return -1;
  id.id.event = ev;
  if (ev->status) {
    errno = ev->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : ev->status < 0 ? -ev->status : ev->status;
    return -1;
  }
  return 0;
}

}  // namespace uroce::rdmacm

using namespace uroce;
using namespace uroce::rdmacm;

UROCE_C_API rdma_event_channel* rdma_create_event_channel(void) {
  if (!lib()) return nullptr;
  Channel* ch = new_channel(false);
  if (!ch) {
    fail("rdma_create_event_channel", errno, "eventfd failed");
    return nullptr;
  }
  return &ch->ch;
}

UROCE_C_API void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel) retire_channel(to_channel(channel));
}

UROCE_C_API int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) return fail("rdma_get_cm_event", EINVAL, "no channel or no event pointer");
  return next_event(*to_channel(channel), event);
}

UROCE_C_API int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail("rdma_ack_cm_event", EINVAL, "no event");
  EventBox* box = to_box(event);
  if (CmId* owner = box->owner) {
    std::lock_guard g(owner->mu);
    --owner->outstanding;
    owner->cv.notify_all();
  }
  delete box;
  return 0;
}

UROCE_C_API int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  CmId* c = to_cm(id);
  Channel* to = channel ? to_channel(channel) : new_channel(true);
  if (!to) return fail("rdma_migrate_id", errno, "eventfd failed");
  // A synchronous id holds the event of its last operation (a request from
  // rdma_get_request, say) until its next one: it is acknowledged here, as
  // rdma-core does, or the wait below would wait for itself.
  if (c->sync && c->id.event) {
    rdma_ack_cm_event(c->id.event);
    c->id.event = nullptr;
  }
  // Events handed out for the id must be acknowledged first.
  {
    std::unique_lock g(c->mu);
    c->cv.wait(g, [c] { return c->outstanding == 0; });
  }
  Channel* from = c->chan;
  if (from == to) return 0;
  // Under the Cm's lock: its sink reads c->chan when it delivers.
  cm_of(*lib()).with_lock([&] {
    for (EventBox* b : take_events(*from, c)) push_event(*to, b);
    c->chan = to;
    c->sync = to->internal;
    c->id.channel = &to->ch;
  });
  if (from->internal) retire_channel(from);
  return 0;
}

UROCE_C_API const char* rdma_event_str(rdma_cm_event_type event) {
  return cm::to_string(cm::EventType(uint8_t(event)));
}
