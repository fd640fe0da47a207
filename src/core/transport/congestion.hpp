// Congestion control of connected QPs (RC, UC, XRC): ECN marking, CNPs and
// the rate control that reacts to them (docs/congestion.md).
//
//  - Every packet of a connected QP leaves ECN-capable, ECT(0), with the
//    DSCP of the QP's traffic class, so a congested switch marks it CE
//    instead of dropping it.
//  - Notification point: a QP that receives a CE-marked packet answers with
//    a CNP (BTH opcode 0x81, BECN set, 16 reserved bytes; RoCEv2 annex A17)
//    to its peer QP, at most one per `cnp_interval`.
//  - Reaction point: a CNP for one of our QPs from its peer cuts that QP's
//    rate (dcqcn.hpp); a limited QP's requester is paced at that rate.
// All of it is off with UROCE_CC=none (then packets leave Not-ECT, CNPs are
// counted and ignored, nothing is paced).  NIC lock held for all of these.
#pragma once

#include <cstdint>

#include "transport/dcqcn.hpp"
#include "uroce/congestion.hpp"

namespace uroce::transport {

class Nic;
class QpEngine;

using uroce::CcMode;
using uroce::CongestionConfig;
const char* to_string(CcMode m) noexcept;
// Applies UROCE_CC ("swift", "dcqcn", "none") and UROCE_SR ("0", "1") to `cfg`;
// false with `bad` naming the variable whose value is not one of those.
bool congestion_from_env(CongestionConfig& cfg, const char*& bad) noexcept;

inline constexpr uint8_t kEcnMask = 0x03, kEct0 = 0x02, kEcnCe = 0x03;

// The IP TOS byte of a connected QP's packets.
uint8_t qp_tos(const Nic& nic, const QpEngine& qp) noexcept;
// A packet for `qp` arrived with CE set.
void congestion_marked(Nic& nic, QpEngine& qp) noexcept;
// A CNP for `qp` arrived from its peer.
void congestion_notified(Nic& nic, QpEngine& qp) noexcept;
// Whether `qp` is paced (a DCQCN rate, or a small Swift window yielding
// to delay, not competing: the window spread over the round trip); if so,
// `at` is when its next packet may leave.
bool pace_next(const Nic& nic, const QpEngine& qp, Clock::time_point& at) noexcept;
// Whether `qp`'s requester may send now; if not, a timer is armed for when
// it may.
bool pace_allows(Nic& nic, QpEngine& qp) noexcept;
// How many MTU-sized packets a paced QP sends in a quarter of its
// retransmission interval (at least 1): it asks for an ACK that often.
uint32_t paced_ack_every(const Nic& nic, const QpEngine& qp) noexcept;
// A packet of `bytes` (payload + headers) left for `qp`.
void pace_sent(Nic& nic, QpEngine& qp, uint32_t bytes) noexcept;

}  // namespace uroce::transport
