// Congestion control of a device's connected QPs (docs/congestion.md): ECN
// marking, CNPs, and the rate control that reacts to them.  A device opened
// without a CongestionConfig takes the mode from UROCE_CC ("dcqcn", the
// default, or "none") and the parameters below.
#pragma once

#include <chrono>
#include <cstdint>

namespace uroce {

enum class CcMode : uint8_t {
  none,   // packets leave Not-ECT; CNPs are counted and ignored; nothing is paced
  dcqcn,  // ECT(0), CNPs for CE marks, DCQCN's rate reaction
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

struct CongestionConfig {
  CcMode mode = CcMode::dcqcn;
  DcqcnParams dcqcn;
  // Loss recovery: a responder keeps packets that arrive after a lost one
  // and a requester whose peer does so resends only what was lost
  // (UROCE_SR=0: go-back-N on both sides, as rdma_rxe).
  bool selective_repeat = true;
  // A packet resent alone (or una, to a peer that keeps) that stays
  // unacknowledged for about two round trips, and at least this long, goes
  // again.  Scheduling delays of a loaded host exceed a LAN's round trip:
  // below this a slow ACK would draw needless resends.
  std::chrono::microseconds resend_wait_min{500};
};

}  // namespace uroce
