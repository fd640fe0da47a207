// Fault injection: a bad network on demand, to test RDMA code against loss,
// duplication, reordering, delay and corruption.
//
// A device opened with faults (DeviceInfo::faults, or the environment
// variable UROCE_FAULTS for every device of the process) passes each packet
// it sends and/or receives through a fault injector.  Decisions come from a
// small pseudo-random generator per direction seeded from `seed`: the same
// seed and the same packet sequence give the same faults.  Every fault is
// counted (fault_tx_dropped, fault_rx_duplicated, ... in Context::counters()
// and `uroce stat`).
//
// UROCE_FAULTS syntax: comma-separated key=value items (docs/faults.md):
//
//   seed=7,drop=0.05,dup=0.01,reorder=0.02:8,delay=0.01:200us,corrupt=0.001,dir=tx,ops=all
//
//   seed=N            generator seed (default 1)
//   drop=P            drop a packet with probability P (0..1, or a percentage "5%")
//   dup=P             send/deliver a packet twice
//   reorder=P[:N]     hold a packet back until up to N (default 8) later packets
//                     have passed it (or 1 ms passed, whichever is first)
//   delay=P[:T]       hold a packet back for a uniform 0..T (default 1ms; units
//                     us, ms, s; a bare number is microseconds)
//   corrupt=P         flip one byte of a copy of the packet (the ICRC check of
//                     the receiver must catch it)
//   ce=P              mark an ECN-capable packet Congestion Experienced, as a
//                     congested switch would (the receiver answers with CNPs)
//   dir=tx|rx|both    which direction the unprefixed rates apply to (default
//                     tx: a packet between two devices with faults then meets
//                     the rates once)
//   tx.KEY=.. rx.KEY=..  a rate for one direction only (tx.drop=0.1,rx.dup=0.02)
//   ops=CLASS[+CLASS..]  which packets may be hit: data (SEND/WRITE), read
//                     (READ requests and responses), atomic (atomic requests
//                     and ACKs), ack (ACK/NAK), ud (UD sends), other (CNP and
//                     unknown), all (default)
//   off               no faults (also: an empty string)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "uroce/status.hpp"

namespace uroce {

// Packet classes a fault may hit (FaultConfig::ops).
namespace fault_ops {
inline constexpr uint32_t kData = 1u << 0;    // SEND, WRITE (RC and UC)
inline constexpr uint32_t kRead = 1u << 1;    // READ request, READ responses
inline constexpr uint32_t kAtomic = 1u << 2;  // atomic requests, atomic ACKs
inline constexpr uint32_t kAck = 1u << 3;     // ACK and NAK
inline constexpr uint32_t kUd = 1u << 4;      // UD sends
inline constexpr uint32_t kOther = 1u << 5;   // CNP, unknown opcodes, runts
inline constexpr uint32_t kAll = (1u << 6) - 1;
}  // namespace fault_ops

// The faults of one direction.  Probabilities are per packet, 0..1; they
// are independent draws (a packet may be duplicated and its copy delayed).
struct FaultRates {
  double drop = 0;
  double dup = 0;
  double reorder = 0;
  double delay = 0;
  double corrupt = 0;
  double ce = 0;                 // ECN CE marking of ECT packets
  uint32_t reorder_max = 8;      // a reordered packet falls back 1..reorder_max packets
  uint32_t delay_max_us = 1000;  // a delayed packet waits 0..delay_max_us

  bool any() const noexcept { return drop > 0 || dup > 0 || reorder > 0 || delay > 0 || corrupt > 0 || ce > 0; }
  bool operator==(const FaultRates&) const = default;
};

struct FaultConfig {
  uint64_t seed = 1;
  FaultRates tx{};  // packets this device sends
  FaultRates rx{};  // packets this device receives
  uint32_t ops = fault_ops::kAll;

  bool any() const noexcept { return (tx.any() || rx.any()) && ops != 0; }
  bool operator==(const FaultConfig&) const = default;
};

// Parses the UROCE_FAULTS syntax above.  EINVAL names the item at fault.
Result<FaultConfig> parse_faults(std::string_view spec);

// The canonical text of a configuration (parse_faults reads it back).
std::string to_string(const FaultConfig& cfg);

}  // namespace uroce
