#include "cm/service.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/quiet_thread.hpp"

namespace uroce::cm {

namespace {
constexpr size_t kInboxLimit = 4096;  // MADs waiting; more are dropped (the peer retries)
}

Service::Service(Cm& cm) : cm_(cm) {
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  cm_.set_waker([this] { wake(); });
  thread_ = start_quiet_thread("uroce-cm", [this] { run(); });  // none of the application's signals
}

Service::~Service() {
  cm_.set_waker(nullptr);
  stop_.store(true, std::memory_order_release);
  wake();
  join_quiet_thread(thread_);
  if (efd_ >= 0) ::close(efd_);
}

void Service::wake() noexcept {
  const uint64_t one = 1;
  ssize_t r = ::write(efd_, &one, sizeof one);
  (void)r;
}

void Service::on_mad(GsiPort& port, const GsiMad& mad) noexcept {
  if (mad.data.size() > kMadSize) return;
  {
    std::lock_guard g(mu_);
    if (inbox_.size() >= kInboxLimit) return;
    Inbound& in = inbox_.emplace_back();
    in.port = &port;
    in.len = mad.data.size();
    std::memcpy(in.data.data(), mad.data.data(), in.len);
    in.src = mad.src;
    in.dst = mad.dst;
    in.src_qp = mad.src_qp;
    in.pkey = mad.pkey;
  }
  wake();
}

void Service::run() noexcept {
  std::deque<Inbound> batch;
  while (!stop_.load(std::memory_order_acquire)) {
    int timeout_ms = -1;
    const Clock::time_point next = cm_.next_deadline();
    if (next != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(next - Clock::now()).count();
      timeout_ms = left <= 0 ? 0 : int(std::min<int64_t>((left + 999) / 1000, 60'000));
    }
    pollfd pfd{efd_, POLLIN, 0};
    if (timeout_ms != 0) ::poll(&pfd, 1, timeout_ms);
    uint64_t v;
    ssize_t r = ::read(efd_, &v, sizeof v);
    (void)r;
    {
      std::lock_guard g(mu_);
      batch.swap(inbox_);
    }
    for (const Inbound& in : batch) {
      GsiMad mad;
      mad.data = std::span<const uint8_t>(in.data.data(), in.len);
      mad.src = in.src;
      mad.dst = in.dst;
      mad.src_qp = in.src_qp;
      mad.pkey = in.pkey;
      cm_.on_mad(*in.port, mad);
    }
    batch.clear();
    cm_.on_timer();
  }
}

}  // namespace uroce::cm
