// The delay-based send window of a connected QP (uroce/congestion.hpp,
// SwiftParams; docs/congestion.md).  Pure state and arithmetic like
// dcqcn.hpp: time and round trips come in as arguments, so deterministic
// tests drive it by hand.  Windows are in packets; `max` is the QP's largest
// window (requester.hpp), where a new QP starts.
#pragma once

#include <chrono>
#include <cstdint>

#include "transport/work_queue.hpp"  // Clock
#include "uroce/congestion.hpp"

namespace uroce::transport {

using uroce::SwiftParams;

class Swift {
 public:
  enum class Verdict : uint8_t { fine, held, cut };

  // The window, whole packets (at least 1); `max` until the first event.
  uint32_t window(uint32_t max) const noexcept;
  // A round trip of `rtt` was measured: above the target the window is cut,
  // once per round trip (`fine`: below it, or competing).
  // `acked` packets were acknowledged: while the last round trip was under
  // the target (or competing) the window grows by `ai` (`compete_ai`) x
  // acked / window, `ai` per window's worth of ACKs (per round trip),
  // whether or not that round trip could be timed (the packet timed may be
  // lost).
  void on_ack(const SwiftParams& p, uint32_t acked, uint32_t max) noexcept;
  Verdict on_rtt(const SwiftParams& p, Clock::duration rtt, Clock::time_point now, uint32_t max) noexcept;
  // A packet was lost.  `random_possible`: the peer keeps what follows a
  // loss, so a loss without a queue costs nothing; otherwise (go-back-N
  // resends the window) it halves the window like a congestive one;
  // competing, it takes the window to `compete_beta` of itself.  True if the
  // window was cut.  Once per window of packets: the caller's to gate.
  bool on_loss(const SwiftParams& p, Clock::time_point now, uint32_t max, bool random_possible) noexcept;
  // Nothing came back in time: half the window, at once.  Losses take it
  // down to `loss_window`, no further.
  void on_timeout(const SwiftParams& p, Clock::time_point now, uint32_t max) noexcept;

  // The least round trip of the last one to two base periods (0: none yet).
  Clock::duration base() const noexcept;
  Clock::duration target(const SwiftParams& p) const noexcept { return base() + p.target_delay; }
  // Pacing: a window cut to `pace_below` packets or less, yielding to
  // delay.  (Not a large window: on a fast path the wake-ups pacing takes
  // cost more than the bursts it spreads; ib_write_bw 1 MiB on a veth fell
  // from ~3.3 to ~2.4 GB/s with every cut window paced.  Nor one competing
  // for a queue: SwiftParams::compete_ai.)
  bool paced(const SwiftParams& p, uint32_t max) const noexcept {
    return cwnd_ != 0 && cwnd_ < max && !competing_ && cwnd_ <= p.pace_below;
  }
  // A packet of `bytes` left: the next may leave bytes / (pace_gain x
  // window x mtu / srtt) later (less credit saved beyond pace_burst).
  void on_sent(const SwiftParams& p, uint32_t bytes, Clock::time_point now, Clock::duration srtt, uint32_t mtu,
               uint32_t max) noexcept;
  Clock::time_point next_send() const noexcept { return next_send_; }
  // Whether any event reached it yet (a QP of CcMode::swift).
  bool started() const noexcept { return cwnd_ != 0; }
  // Yielding to delay did not drain the queue (`compete_after` cuts in a
  // row), or a queue overflowed: reacting to losses only, until
  // `calm_to_leave` round trips in a row come in under the target.
  bool competing() const noexcept { return competing_; }

 private:
  void start(uint32_t max) noexcept;
  bool cut(double floor, double factor, Clock::time_point now) noexcept;
  // `factor` of the window, not below `floor` (nor below 1; a window already
  // under `floor` stays), at once.
  void reduce(double floor, double factor, Clock::time_point now) noexcept;

  double cwnd_ = 0;  // 0: not started
  Clock::duration base_{Clock::duration::max()}, epoch_min_{Clock::duration::max()};
  Clock::time_point epoch_at_{};
  Clock::duration last_rtt_{};
  Clock::time_point last_cut_{};
  Clock::time_point next_send_{};
  uint32_t cuts_in_a_row_ = 0;
  uint32_t calm_ = 0;  // competing: round trips in a row under the target
  bool competing_ = false;
};

}  // namespace uroce::transport
