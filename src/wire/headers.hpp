// RoCEv2 transport headers as plain values (IBA vol. 1 sec. 9.2-9.5).
// Encoding and decoding live in packet.hpp and are driven by the opcode table;
// these structs are host-order values, not wire images.  All multi-byte
// fields are big-endian on the wire; exceptions: the ICRC (LSB first, see
// icrc.hpp) and the ImmDt, which is carried as four opaque bytes.
#pragma once

#include <cstdint>

#include "wire/opcode.hpp"

namespace uroce::wire {

// 24-bit fields: QP numbers, PSNs, MSNs, XRC SRQ numbers.
inline constexpr uint32_t kQpnMask = 0x00ffffff;
inline constexpr uint32_t kPsnMask = 0x00ffffff;

//  Base Transport Header, 12 bytes
//   0                   1                   2                   3
//   0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |    OpCode     |S|M|Pad| TVer  |        Partition Key          |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |F|B|  Resv6    |           Destination QP                      |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |A|   Resv7     |           Packet Sequence Number              |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
struct Bth {
  uint8_t opcode = 0;
  bool solicited = false;  // S
  bool mig_req = false;    // M
  uint8_t pad = 0;         // 0..3 bytes of pad after the payload
  uint8_t tver = 0;        // must be 0
  uint16_t pkey = 0xffff;
  bool fecn = false;     // F (RoCEv2: not covered by the ICRC)
  bool becn = false;     // B
  uint32_t dest_qp = 0;  // 24 bits
  bool ack_req = false;  // A
  uint32_t psn = 0;      // 24 bits

  friend bool operator==(const Bth&, const Bth&) = default;
};

// Partition keys (IBA 10.9.3): the low 15 bits name the partition, the top
// bit says full (1) or limited (0) membership.  Two keys match when they name
// the same partition and at least one is a full member; 0x0000 and 0x8000
// are invalid and match nothing.  A RoCE port's table holds the default key
// 0xFFFF, which a limited member's 0x7FFF also matches.
inline constexpr uint16_t kDefaultPkey = 0xffff;
constexpr bool pkey_matches(uint16_t a, uint16_t b) noexcept {
  return (a & 0x7fff) != 0 && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000) != 0;
}

//  XRC Extended Transport Header (IBA 9.3.8), 4 bytes, right after the BTH of
//  every XRC request; stored in Headers::xrc_srqn.
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |    Resv8      |             XRC SRQ number                    |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

//  RDMA Extended Transport Header (IBA 9.3.3), 16 bytes
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  Virtual Address (63..32)                     |
//  |                  Virtual Address (31..0)                      |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  R_Key                                        |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  DMA Length                                   |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;

  friend bool operator==(const Reth&, const Reth&) = default;
};

//  ACK Extended Transport Header (IBA 9.3.5), 4 bytes
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |   Syndrome    |         Message Sequence Number               |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  Syndrome: 0b0cc nnnnn.  cc=00 ACK (n = credit count), 01 RNR NAK (n = timer),
//  11 NAK (n = code), 10 reserved.
struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits

  friend bool operator==(const Aeth&, const Aeth&) = default;
};

enum class AckType : uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };
enum class NakCode : uint8_t {
  psn_sequence_error = 0,
  invalid_request = 1,
  remote_access_error = 2,
  remote_operational_error = 3,
  invalid_rd_request = 4,
};
inline constexpr AckType aeth_type(uint8_t syndrome) noexcept { return AckType((syndrome >> 5) & 3); }
inline constexpr uint8_t aeth_value(uint8_t syndrome) noexcept { return syndrome & 0x1f; }
inline constexpr uint8_t make_syndrome(AckType t, uint8_t v) noexcept {
  return uint8_t((uint8_t(t) << 5) | (v & 0x1f));
}
// Credit count 0x1f means "invalid credit count" (no end-to-end flow control).
inline constexpr uint8_t kCreditsInvalid = 0x1f;

//  Atomic Extended Transport Header (IBA 9.3.4), 28 bytes
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  Virtual Address (64)                         |
//  |                                                               |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  R_Key                                        |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  Swap (or Add) Data (64)                      |
//  |                                                               |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  Compare Data (64)                            |
//  |                                                               |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;

  friend bool operator==(const AtomicEth&, const AtomicEth&) = default;
};

//  Atomic Acknowledge Extended Transport Header (IBA 9.3.6), 8 bytes: the
//  original remote data, after the AETH of an ATOMIC_ACK
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  Original Remote Data (64)                    |
//  |                                                               |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
struct AtomicAckEth {
  uint64_t orig = 0;

  friend bool operator==(const AtomicAckEth&, const AtomicAckEth&) = default;
};

//  Datagram Extended Transport Header (IBA 9.3.2), 8 bytes
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |                  Queue Key                                    |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |    Resv8      |             Source QP                         |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
struct Deth {
  uint32_t qkey = 0;
  uint32_t src_qp = 0;  // 24 bits

  friend bool operator==(const Deth&, const Deth&) = default;
};

//  Immediate Data (IBA 9.3.7) and Invalidate ETH (IBA 9.3.9), 4 bytes each
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |            Immediate Data  /  R_Key to invalidate             |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
//  CNP (annex A17.9.3): BTH (opcode 0x81, DestQP = the QP to throttle,
//  BECN set by ConnectX) + 16 reserved bytes (sent as zero, ignored).

// All headers of one packet.  Which ones are meaningful is given by the
// opcode's flags; the others are ignored by the encoder.
struct Headers {
  Bth bth;
  uint32_t xrc_srqn = 0;  // XRCETH, 24 bits
  Reth reth;
  Aeth aeth;
  AtomicEth atomic;
  AtomicAckEth atomic_ack;
  uint32_t imm = 0;   // ImmDt exactly as ibv_send_wr/ibv_wc hold it: the four
                      // wire bytes in memory order (a __be32), copied, never swapped
  uint32_t ieth = 0;  // IETH: the R_Key to invalidate (host order)
  Deth deth;

  friend bool operator==(const Headers&, const Headers&) = default;
};

}  // namespace uroce::wire
