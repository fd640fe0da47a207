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
  rc_send_first = 0x00,
  rc_send_middle = 0x01,
  rc_send_last = 0x02,
  rc_send_last_imm = 0x03,
  rc_send_only = 0x04,
  rc_send_only_imm = 0x05,
  rc_write_first = 0x06,
  rc_write_middle = 0x07,
  rc_write_last = 0x08,
  rc_write_last_imm = 0x09,
  rc_write_only = 0x0a,
  rc_write_only_imm = 0x0b,
  rc_read_request = 0x0c,
  rc_read_response_first = 0x0d,
  rc_read_response_middle = 0x0e,
  rc_read_response_last = 0x0f,
  rc_read_response_only = 0x10,
  rc_ack = 0x11,
  rc_atomic_ack = 0x12,
  rc_compare_swap = 0x13,
  rc_fetch_add = 0x14,
  rc_send_last_inv = 0x16,
  rc_send_only_inv = 0x17,
  // Unreliable Connection
  uc_send_first = 0x20,
  uc_send_middle = 0x21,
  uc_send_last = 0x22,
  uc_send_last_imm = 0x23,
  uc_send_only = 0x24,
  uc_send_only_imm = 0x25,
  uc_write_first = 0x26,
  uc_write_middle = 0x27,
  uc_write_last = 0x28,
  uc_write_last_imm = 0x29,
  uc_write_only = 0x2a,
  uc_write_only_imm = 0x2b,
  // Unreliable Datagram
  ud_send_only = 0x64,
  ud_send_only_imm = 0x65,
  // Congestion Notification Packet (RoCEv2 annex A17.9)
  cnp = 0x81,
  // Extended Reliable Connection: RC layouts with an XRCETH after the BTH
  xrc_send_first = 0xa0,
  xrc_send_middle = 0xa1,
  xrc_send_last = 0xa2,
  xrc_send_last_imm = 0xa3,
  xrc_send_only = 0xa4,
  xrc_send_only_imm = 0xa5,
  xrc_write_first = 0xa6,
  xrc_write_middle = 0xa7,
  xrc_write_last = 0xa8,
  xrc_write_last_imm = 0xa9,
  xrc_write_only = 0xaa,
  xrc_write_only_imm = 0xab,
  xrc_read_request = 0xac,
  xrc_read_response_first = 0xad,
  xrc_read_response_middle = 0xae,
  xrc_read_response_last = 0xaf,
  xrc_read_response_only = 0xb0,
  xrc_ack = 0xb1,
  xrc_atomic_ack = 0xb2,
  xrc_compare_swap = 0xb3,
  xrc_fetch_add = 0xb4,
  xrc_send_last_inv = 0xb6,
  xrc_send_only_inv = 0xb7,
  // Manufacturer-specific (IBA 9.2.3: 0xc0-0xff), between uroce peers only
  // (sack.hpp): a requester asks for SACKs, a responder sends them; and
  // (copy.hpp) the one-copy WRITE between processes of one host.
  uroce_sack_hello = 0xc0,
  uroce_sack = 0xc1,
  uroce_copy_write = 0xc2,
  uroce_copy_nak = 0xc3,
  uroce_copy_read = 0xc4,
  uroce_copy_read_done = 0xc5,
};

// `uroce`: the manufacturer-specific opcodes above, addressed to an RC QP.
enum class Service : uint8_t { rc, uc, rd, ud, cnp, xrc, uroce, none };

// The connected services' opcodes are a service prefix (top 3 bits) | the
// operation (low 5): UC's are RC's | 0x20, XRC's RC's | 0xa0.
inline constexpr uint8_t kUcOpcodes = 0x20;
inline constexpr uint8_t kXrcOpcodes = 0xa0;
inline constexpr uint8_t kOperationMask = 0x1f;

// An ACKNOWLEDGE (an AETH alone: ACK, NAK or RNR NAK) of RC or XRC, the
// shortest packet there is: a GSO train can only end with one.
constexpr bool is_acknowledge(uint8_t opcode) noexcept {
  return opcode == uint8_t(Opcode::rc_ack) || opcode == uint8_t(Opcode::xrc_ack);
}

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
inline constexpr uint32_t kRead = 1u << 15;    // READ request or READ response
inline constexpr uint32_t kAtomic = 1u << 16;  // atomic request or atomic ack
inline constexpr uint32_t kAck = 1u << 17;     // plain ACK/NAK (not the atomic ACK)
// position in the message; single-packet messages (READ request, atomics,
// ACK, atomic ACK, UD sends) are kOnly.  CNP has no position.
inline constexpr uint32_t kFirst = 1u << 18;
inline constexpr uint32_t kMiddle = 1u << 19;
inline constexpr uint32_t kLast = 1u << 20;
inline constexpr uint32_t kOnly = kFirst | kLast;
// the message completion at the responder consumes a receive WQE:
// SEND_LAST*, SEND_ONLY*, WRITE_LAST_IMM, WRITE_ONLY_IMM and the UD sends
inline constexpr uint32_t kConsumesRecv = 1u << 21;
}  // namespace op

// Header lengths in bytes (IBA 9.2-9.5; XRCETH 9.3.8; CNP annex A17.9.3).
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
// The longest BTH + extension headers of any opcode: XRC COMPARE_SWAP and
// FETCH_ADD (BTH + XRCETH + AtomicETH = 44).  Checked against the table below.
inline constexpr unsigned kMaxHeaderLen = kBthLen + kXrcethLen + kAtomicEthLen;

struct OpcodeInfo {
  const char* name;  // "RC_SEND_FIRST"; nullptr for an opcode we do not know
  uint32_t flags;    // op::k*
  Service service;
  uint8_t header_len;  // BTH + all extension headers (for CNP: + 16 reserved bytes)
  // offsets from the start of the BTH; 0 = header absent
  uint8_t xrceth, reth, aeth, atomic_eth, atomic_ack_eth, imm, ieth, deth;

  constexpr bool valid() const noexcept { return flags & op::kValid; }
  constexpr bool has(uint32_t f) const noexcept { return (flags & f) == f; }
};

namespace detail {

// Lays the extension headers out after the BTH in the order of IBA 9.2:
// XRCETH, DETH | RETH | AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
constexpr OpcodeInfo make_info(const char* name, Service service, uint32_t flags) noexcept {
  OpcodeInfo i{name, flags | op::kValid, service, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  unsigned off = kBthLen;
  auto place = [&](uint32_t f, uint8_t& field, unsigned len) {
    if (flags & f) {
      field = uint8_t(off);
      off += len;
    }
  };
  place(op::kXrceth, i.xrceth, kXrcethLen);
  place(op::kDeth, i.deth, kDethLen);
  place(op::kReth, i.reth, kRethLen);
  place(op::kAtomicEth, i.atomic_eth, kAtomicEthLen);
  place(op::kAeth, i.aeth, kAethLen);
  place(op::kAtomicAckEth, i.atomic_ack_eth, kAtomicAckEthLen);
  place(op::kImm, i.imm, kImmLen);
  place(op::kIeth, i.ieth, kIethLen);
  if (flags & op::kCnpPad) off += kCnpPadLen;
  i.header_len = uint8_t(off);
  return i;
}

// One row per operation (low 5 bits of the opcode) of the connected services;
// a null name means the service does not have that operation (IBA table 35).
struct OpRow {
  uint8_t low;
  uint32_t flags;
  const char* rc;
  const char* uc;
  const char* xrc;
};

inline constexpr uint32_t kSendReq = op::kRequest | op::kSend | op::kPayload;
inline constexpr uint32_t kWriteReq = op::kRequest | op::kWrite | op::kPayload;
inline constexpr uint32_t kReadResp = op::kResponse | op::kRead | op::kPayload;
inline constexpr uint32_t kRecv = op::kConsumesRecv;

inline constexpr OpRow kConnectedOps[] = {
    {0x00, kSendReq | op::kFirst, "RC_SEND_FIRST", "UC_SEND_FIRST", "XRC_SEND_FIRST"},
    {0x01, kSendReq | op::kMiddle, "RC_SEND_MIDDLE", "UC_SEND_MIDDLE", "XRC_SEND_MIDDLE"},
    {0x02, kSendReq | op::kLast | kRecv, "RC_SEND_LAST", "UC_SEND_LAST", "XRC_SEND_LAST"},
    {0x03, kSendReq | op::kLast | kRecv | op::kImm, "RC_SEND_LAST_IMM", "UC_SEND_LAST_IMM", "XRC_SEND_LAST_IMM"},
    {0x04, kSendReq | op::kOnly | kRecv, "RC_SEND_ONLY", "UC_SEND_ONLY", "XRC_SEND_ONLY"},
    {0x05, kSendReq | op::kOnly | kRecv | op::kImm, "RC_SEND_ONLY_IMM", "UC_SEND_ONLY_IMM", "XRC_SEND_ONLY_IMM"},
    {0x06, kWriteReq | op::kFirst | op::kReth, "RC_WRITE_FIRST", "UC_WRITE_FIRST", "XRC_WRITE_FIRST"},
    {0x07, kWriteReq | op::kMiddle, "RC_WRITE_MIDDLE", "UC_WRITE_MIDDLE", "XRC_WRITE_MIDDLE"},
    {0x08, kWriteReq | op::kLast, "RC_WRITE_LAST", "UC_WRITE_LAST", "XRC_WRITE_LAST"},
    {0x09, kWriteReq | op::kLast | kRecv | op::kImm, "RC_WRITE_LAST_IMM", "UC_WRITE_LAST_IMM", "XRC_WRITE_LAST_IMM"},
    {0x0a, kWriteReq | op::kOnly | op::kReth, "RC_WRITE_ONLY", "UC_WRITE_ONLY", "XRC_WRITE_ONLY"},
    {0x0b, kWriteReq | op::kOnly | kRecv | op::kReth | op::kImm, "RC_WRITE_ONLY_IMM", "UC_WRITE_ONLY_IMM",
     "XRC_WRITE_ONLY_IMM"},
    {0x0c, op::kRequest | op::kRead | op::kOnly | op::kReth, "RC_READ_REQUEST", nullptr, "XRC_READ_REQUEST"},
    {0x0d, kReadResp | op::kFirst | op::kAeth, "RC_READ_RESPONSE_FIRST", nullptr, "XRC_READ_RESPONSE_FIRST"},
    {0x0e, kReadResp | op::kMiddle, "RC_READ_RESPONSE_MIDDLE", nullptr, "XRC_READ_RESPONSE_MIDDLE"},
    {0x0f, kReadResp | op::kLast | op::kAeth, "RC_READ_RESPONSE_LAST", nullptr, "XRC_READ_RESPONSE_LAST"},
    {0x10, kReadResp | op::kOnly | op::kAeth, "RC_READ_RESPONSE_ONLY", nullptr, "XRC_READ_RESPONSE_ONLY"},
    {0x11, op::kResponse | op::kAck | op::kOnly | op::kAeth, "RC_ACK", nullptr, "XRC_ACK"},
    {0x12, op::kResponse | op::kAtomic | op::kOnly | op::kAeth | op::kAtomicAckEth, "RC_ATOMIC_ACK", nullptr,
     "XRC_ATOMIC_ACK"},
    {0x13, op::kRequest | op::kAtomic | op::kOnly | op::kAtomicEth, "RC_COMPARE_SWAP", nullptr, "XRC_COMPARE_SWAP"},
    {0x14, op::kRequest | op::kAtomic | op::kOnly | op::kAtomicEth, "RC_FETCH_ADD", nullptr, "XRC_FETCH_ADD"},
    {0x16, kSendReq | op::kLast | kRecv | op::kIeth, "RC_SEND_LAST_INV", nullptr, "XRC_SEND_LAST_INV"},
    {0x17, kSendReq | op::kOnly | kRecv | op::kIeth, "RC_SEND_ONLY_INV", nullptr, "XRC_SEND_ONLY_INV"},
};

constexpr std::array<OpcodeInfo, 256> make_opcode_table() noexcept {
  std::array<OpcodeInfo, 256> t{};
  for (const OpRow& r : kConnectedOps) {
    if (r.rc) t[0x00 | r.low] = make_info(r.rc, Service::rc, r.flags);
    if (r.uc) t[0x20 | r.low] = make_info(r.uc, Service::uc, r.flags);
    // XRC requests name the target SRQ in an XRCETH; responses go back to the
    // initiator QP and carry none (IBA 9.3.8).
    const uint32_t xrc = r.flags & op::kRequest ? op::kXrceth : 0;
    if (r.xrc) t[0xa0 | r.low] = make_info(r.xrc, Service::xrc, r.flags | xrc);
  }
  const uint32_t ud = kSendReq | op::kOnly | kRecv | op::kDeth;
  t[0x64] = make_info("UD_SEND_ONLY", Service::ud, ud);
  t[0x65] = make_info("UD_SEND_ONLY_IMM", Service::ud, ud | op::kImm);
  t[0x81] = make_info("CNP", Service::cnp, op::kCnpPad);
  // (Neither a request nor a response of the RC protocol: no kRequest or
  // kResponse.)
  t[0xc0] = make_info("UROCE_SACK_HELLO", Service::uroce, op::kOnly | op::kPayload);
  t[0xc1] = make_info("UROCE_SACK", Service::uroce, op::kOnly | op::kPayload);
  t[0xc2] = make_info("UROCE_COPY_WRITE", Service::uroce, op::kOnly | op::kPayload);
  t[0xc3] = make_info("UROCE_COPY_NAK", Service::uroce, op::kOnly | op::kPayload);
  t[0xc4] = make_info("UROCE_COPY_READ", Service::uroce, op::kOnly | op::kPayload);
  t[0xc5] = make_info("UROCE_COPY_READ_DONE", Service::uroce, op::kOnly | op::kPayload);
  return t;
}

}  // namespace detail

// The table, indexed by opcode byte.  Unknown opcodes have flags == 0.
inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

constexpr const std::array<OpcodeInfo, 256>& opcode_table() noexcept { return kOpcodeTable; }
constexpr const OpcodeInfo& info(uint8_t opcode) noexcept { return kOpcodeTable[opcode]; }
constexpr const OpcodeInfo& info(Opcode opcode) noexcept { return kOpcodeTable[uint8_t(opcode)]; }

namespace detail {
constexpr unsigned max_header_len() noexcept {
  unsigned m = 0;
  for (const OpcodeInfo& i : kOpcodeTable) m = i.header_len > m ? i.header_len : m;
  return m;
}
}  // namespace detail
static_assert(detail::max_header_len() == kMaxHeaderLen);
static_assert(info(Opcode::xrc_write_only_imm).header_len == 36);
static_assert(info(Opcode::cnp).header_len == kBthLen + kCnpPadLen);

}  // namespace uroce::wire
