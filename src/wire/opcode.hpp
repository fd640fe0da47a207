// The RoCEv2 opcode table (IBA vol. 1 sec. 9.2, 9.4; annex A17 for CNP).
//
// One constexpr table that the encoder, the decoder and the validator all
// read: for each opcode its name, its flags and the offset (from the start of
// the BTH) of every extension header it carries.  Offsets of 0 mean "absent".
#pragma once

#include <array>
#include <cstdint>

namespace uroce::wire {

// Opcode = transport service (top 3 bits) | operation (low 5 bits).
enum class Opcode : uint8_t {
  // Reliable Connection
  rc_send_first = 0x00, rc_send_middle = 0x01, rc_send_last = 0x02, rc_send_last_imm = 0x03,
  rc_send_only = 0x04, rc_send_only_imm = 0x05, rc_write_first = 0x06, rc_write_middle = 0x07,
  rc_write_last = 0x08, rc_write_last_imm = 0x09, rc_write_only = 0x0a, rc_write_only_imm = 0x0b,
  rc_read_request = 0x0c, rc_read_response_first = 0x0d, rc_read_response_middle = 0x0e,
  rc_read_response_last = 0x0f, rc_read_response_only = 0x10, rc_ack = 0x11,
  rc_atomic_ack = 0x12, rc_compare_swap = 0x13, rc_fetch_add = 0x14,
  rc_send_last_inv = 0x16, rc_send_only_inv = 0x17,
  // Unreliable Connection
  uc_send_first = 0x20, uc_send_middle = 0x21, uc_send_last = 0x22, uc_send_last_imm = 0x23,
  uc_send_only = 0x24, uc_send_only_imm = 0x25, uc_write_first = 0x26, uc_write_middle = 0x27,
  uc_write_last = 0x28, uc_write_last_imm = 0x29, uc_write_only = 0x2a, uc_write_only_imm = 0x2b,
  // Unreliable Datagram
  ud_send_only = 0x64, ud_send_only_imm = 0x65,
  // Congestion Notification Packet (RoCEv2 annex A17.9)
  cnp = 0x81,
  // Extended Reliable Connection: RC layouts with an XRCETH after the BTH
  xrc_send_first = 0xa0, xrc_send_middle = 0xa1, xrc_send_last = 0xa2, xrc_send_last_imm = 0xa3,
  xrc_send_only = 0xa4, xrc_send_only_imm = 0xa5, xrc_write_first = 0xa6, xrc_write_middle = 0xa7,
  xrc_write_last = 0xa8, xrc_write_last_imm = 0xa9, xrc_write_only = 0xaa,
  xrc_write_only_imm = 0xab, xrc_read_request = 0xac, xrc_read_response_first = 0xad,
  xrc_read_response_middle = 0xae, xrc_read_response_last = 0xaf, xrc_read_response_only = 0xb0,
  xrc_ack = 0xb1, xrc_atomic_ack = 0xb2, xrc_compare_swap = 0xb3, xrc_fetch_add = 0xb4,
  xrc_send_last_inv = 0xb6, xrc_send_only_inv = 0xb7,
};

enum class Service : uint8_t { rc, uc, rd, ud, cnp, xrc, none };

// Flags of an opcode.
namespace op {
inline constexpr uint32_t kValid = 1u << 0;
// extension headers present
inline constexpr uint32_t kXrceth = 1u << 1;
inline constexpr uint32_t kReth = 1u << 2;
inline constexpr uint32_t kAeth = 1u << 3;
inline constexpr uint32_t kAtomicEth = 1u << 4;
inline constexpr uint32_t kAtomicAckEth = 1u << 5;
inline constexpr uint32_t kImm = 1u << 6;
inline constexpr uint32_t kIeth = 1u << 7;
inline constexpr uint32_t kDeth = 1u << 8;
inline constexpr uint32_t kCnpPad = 1u << 9;  // CNP: 16 reserved bytes after the BTH
// the packet may carry payload
inline constexpr uint32_t kPayload = 1u << 10;
// direction
inline constexpr uint32_t kRequest = 1u << 11;   // requester -> responder
inline constexpr uint32_t kResponse = 1u << 12;  // responder -> requester
// operation
inline constexpr uint32_t kSend = 1u << 13;
inline constexpr uint32_t kWrite = 1u << 14;
inline constexpr uint32_t kRead = 1u << 15;      // READ request or READ response
inline constexpr uint32_t kAtomic = 1u << 16;    // atomic request or atomic ack
inline constexpr uint32_t kAck = 1u << 17;       // plain ACK/NAK
// position in the message
inline constexpr uint32_t kFirst = 1u << 18;
inline constexpr uint32_t kMiddle = 1u << 19;
inline constexpr uint32_t kLast = 1u << 20;
inline constexpr uint32_t kOnly = kFirst | kLast;
// the message completion at the responder consumes/writes the receive WQE
inline constexpr uint32_t kConsumesRecv = 1u << 21;  // SEND_* and WRITE_*_IMM
}  // namespace op

// Header lengths in bytes (IBA 9.2-9.5; XRCETH 9.3.8).
inline constexpr unsigned kBthLen = 12;
inline constexpr unsigned kXrcethLen = 4;
inline constexpr unsigned kRethLen = 16;
inline constexpr unsigned kAethLen = 4;
inline constexpr unsigned kAtomicEthLen = 28;
inline constexpr unsigned kAtomicAckEthLen = 8;
inline constexpr unsigned kImmLen = 4;
inline constexpr unsigned kIethLen = 4;
inline constexpr unsigned kDethLen = 8;
inline constexpr unsigned kCnpPadLen = 16;
inline constexpr unsigned kIcrcLen = 4;
// The longest BTH + extension headers of any opcode (XRC WRITE_ONLY_IMM).
inline constexpr unsigned kMaxHeaderLen = kBthLen + kXrcethLen + kRethLen + kImmLen;

struct OpcodeInfo {
  const char* name;     // "RC_SEND_FIRST"; nullptr for an opcode we do not know
  uint32_t flags;       // op::k*
  Service service;
  uint8_t header_len;   // BTH + all extension headers
  // offsets from the start of the BTH; 0 = header absent
  uint8_t xrceth, reth, aeth, atomic_eth, atomic_ack_eth, imm, ieth, deth;

  constexpr bool valid() const noexcept { return flags & op::kValid; }
  constexpr bool has(uint32_t f) const noexcept { return (flags & f) == f; }
};

// The table, indexed by opcode byte.  Unknown opcodes have flags == 0.
const std::array<OpcodeInfo, 256>& opcode_table() noexcept;
inline const OpcodeInfo& info(uint8_t opcode) noexcept { return opcode_table()[opcode]; }
inline const OpcodeInfo& info(Opcode opcode) noexcept { return opcode_table()[uint8_t(opcode)]; }

}  // namespace uroce::wire
