// Congestion control of a device's connected QPs (docs/congestion.md): ECN
// marking, CNPs, the rate control that reacts to them, and a window that
// follows the round-trip time.  A device opened without a CongestionConfig
// takes the mode from UROCE_CC ("swift", the default, "dcqcn" or "none") and
// the parameters below.
#pragma once

#include <chrono>
#include <cstdint>

namespace uroce {

enum class CcMode : uint8_t {
  none,   // packets leave Not-ECT; CNPs are counted and ignored; nothing is paced
  dcqcn,  // ECT(0), CNPs for CE marks, DCQCN's rate reaction; a loss-based window
  swift,  // dcqcn's, and the window follows the round-trip time (SwiftParams)
};

// DCQCN (Zhu et al., SIGCOMM 2015).  Rates in Mbit/s.
struct DcqcnParams {
  // Where an unlimited QP takes its first cut from: a software sender
  // reaches about 25 Gbit/s (a loopback path moves 30+).
  uint64_t line_rate = 25000;
  uint64_t min_rate = 10;
  double g = 1.0 / 256;                            // alpha's gain (paper: 1/256)
  std::chrono::microseconds alpha_period{55};      // alpha decays once per period without a CNP
  std::chrono::microseconds increase_period{300};  // rate increase timer (ConnectX: 300 us)
  uint64_t increase_bytes = 10u << 20;             // rate increase byte counter (paper: 10 MB)
  uint32_t fast_recovery_stages = 5;               // F
  uint64_t ai_rate = 40;                           // additive increase step
  uint64_t hai_rate = 200;                         // hyper increase step
  std::chrono::microseconds cnp_interval{50};      // notification point: CNPs per QP at most this often
  std::chrono::microseconds burst{200};            // credit a paced QP may save up (wake-up latency)
};

// A delay-based window (Kumar et al., "Swift", SIGCOMM 2020) that needs no
// switch support: below the target round-trip time the window grows by `ai`
// packets per round trip; above it, it shrinks in proportion to the excess,
// at most once per round trip.  The target is the path's base RTT (the
// least seen lately) plus `target_delay`.  A loss is congestion only when
// the round trip showed a queue; otherwise (random loss) the window stays.
// A queue that does not drain after `compete_after` cuts in a row, or that
// overflows (a loss behind a queue), is not ours alone (a loss-based flow
// filling a drop-tail buffer): the window then stops yielding to delay and
// reacts to losses only, until `calm_to_leave` round trips in a row come in
// under the target (a loss-based flow drains the queue for a few round trips
// after each of its losses: that is not the queue gone).
struct SwiftParams {
  // Queueing the window allows above the base RTT.  Above a user-space
  // host's scheduling noise (tens of us, more when loaded) and the queue a
  // full window builds at a receiver copying at memory speed.
  std::chrono::microseconds target_delay{400};
  double ai = 1.0;          // packets added per round trip below the target
  double beta = 0.8;        // multiplicative decrease per unit of relative excess delay
  double max_mdf = 0.5;     // at most this fraction cut at once
  uint32_t min_window = 2;  // packets
  // A loss without a queue behind it (a READ gap, a go-back-N peer) or a
  // timeout halves the window down to this many packets and no further; a
  // loss behind a queue (or any loss, competing) goes down to min_window.
  uint32_t loss_window = 16;
  std::chrono::milliseconds base_period{5000};  // base RTT: the least of the last one to two periods
  // A window cut to `pace_below` packets or less while yielding to delay
  // (not competing: compete_ai) is paced at `pace_gain` x window / srtt,
  // with at most `pace_burst` of credit saved up: it leaves spread over the
  // round trip instead of as one burst into the queue it yields to.
  double pace_gain = 1.5;
  std::chrono::microseconds pace_burst{20};
  uint32_t pace_below = 32;
  uint32_t compete_after = 8;
  uint32_t calm_to_leave = 64;
  // Competing for a queue a loss-based flow (TCP) keeps full, the window
  // grows `compete_ai` packets per round trip, a loss event (once per window
  // in flight) cuts it to `compete_beta` of itself, and it is not paced.
  // Measured (docs/congestion.md): one flow beside iperf3 through a 1 Gbit/s
  // tbf had a tenth of TCP's goodput halving at one packet per round trip,
  // while TCP kept a window twice as large through five times as many
  // recovery episodes; paced, the new growth and cut gained about half as
  // much as unpaced.  With SACKs: 4 a round trip gave 0.51-0.72x of TCP,
  // 6 0.74-0.99x, 8 2.8-3.2x; 32 QPs share the bottleneck with Jain
  // 0.97-0.98 at 4 and 6.
  double compete_ai = 6.0;
  double compete_beta = 0.7;
};

struct CongestionConfig {
  CcMode mode = CcMode::swift;
  DcqcnParams dcqcn;
  SwiftParams swift;
  // Loss recovery: a responder keeps packets that arrive after a lost one
  // and a requester whose peer does so resends only what was lost
  // (UROCE_SR=0: go-back-N on both sides, as rdma_rxe).
  bool selective_repeat = true;
  // The RC QPs that send to one peer share a window of packets in flight,
  // which losses cut (transport/path_share.hpp): many QPs together do not
  // overflow the peer's receive buffer that one QP's window alone keeps
  // clear of (UROCE_PATH_SHARE=0: each QP's own window only).
  bool share_paths = true;
  // With selective repeat, between uroce peers: once a peer is seen to keep
  // packets, it is asked for SACKs (UROCE_SACK_HELLO), which name what it
  // holds, so that every hole goes again at once and the window counts only
  // packets in flight; a responder answers a hello only with this on
  // (UROCE_SACK=0: holes one NAK at a time, the window from una).
  bool sack = true;
  // A packet resent alone (or una, to a peer that keeps) that stays
  // unacknowledged for about two round trips, and at least this long, goes
  // again.  Scheduling delays of a loaded host exceed a LAN's round trip:
  // below this a slow ACK would draw needless resends.
  std::chrono::microseconds resend_wait_min{500};
  // A QP whose retry count has run out gives up (RETRY_EXC_ERR) only once
  // nothing has been acknowledged for at least this long; until then it
  // resends, each time after as long as the peer has been silent (at most
  // 250 ms).  A NIC answers while its host's programs
  // wait for a CPU; uroce's ACKs come from the peer's process, which the
  // scheduler can hold back longer than retry_cnt timeouts (measured: a
  // busy-polling ibv_rc_pingpong left runnable for 300-550 ms among four
  // on two CPUs under TSan): that peer is slow, not gone.  retry_cnt 0
  // still gives up at the first timeout; 0 here gives up after exactly
  // retry_cnt retries, as rdma_rxe does (UROCE_RETRY_FLOOR_MS).
  std::chrono::milliseconds retry_floor{2000};
};

}  // namespace uroce
