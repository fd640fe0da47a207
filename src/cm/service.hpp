// Service: the thread that runs a Cm.  It receives the MADs of its ports
// (as their GsiReceiver: a copy into an inbox and an eventfd wake-up, all
// the device's thread does), and in its own thread hands them to the Cm and
// runs the Cm's timers.  It sleeps in poll() with the next timer as timeout,
// so an idle CM costs nothing.
//
// Lock order: the device's engine lock (on_mad) -> the inbox lock; the
// thread takes the Cm's lock with neither held.
#pragma once

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "cm/cm.hpp"

namespace uroce::cm {

class Service final : public GsiReceiver {
 public:
  // Starts the thread; sets itself as the Cm's waker.
  explicit Service(Cm& cm);
  ~Service() override;  // stops the thread (detach the ports first)
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  void on_mad(GsiPort& port, const GsiMad& mad) noexcept override;
  void wake() noexcept;

 private:
  struct Inbound {
    GsiPort* port;
    MadBuf data;
    size_t len;
    Endpoint src;
    IpAddr dst;
    uint32_t src_qp;
    uint16_t pkey;
  };
  void run() noexcept;

  Cm& cm_;
  int efd_ = -1;
  std::mutex mu_;
  std::deque<Inbound> inbox_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace uroce::cm
