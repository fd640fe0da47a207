// Encoding and bounds-checked decoding of a RoCEv2 UDP payload:
//   BTH | extension headers | payload | pad (0-3) | ICRC (4, LSB first)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/headers.hpp"
#include "wire/opcode.hpp"

namespace uroce::wire {

// Why a packet was refused.  Each reason is counted separately by the NIC.
enum class DecodeError : uint8_t {
  truncated,           // shorter than BTH + extension headers + ICRC
  unknown_opcode,      // not in the opcode table (or a service we do not speak)
  bad_version,         // BTH TVer != 0
  unexpected_payload,  // payload on an opcode that carries none
  bad_pad,             // pad count larger than the payload, or payload+pad not 4-aligned
};
const char* to_string(DecodeError e) noexcept;

// A decoded packet.  Spans point into the buffer given to decode().
struct Packet {
  Headers hdr;                       // hdr.bth.opcode indexes the opcode table
  const OpcodeInfo* info = nullptr;  // never null after a successful decode
  std::span<const uint8_t> payload;  // application data, without pad
  uint32_t icrc = 0;                 // the ICRC as carried (read LSB first)
};

// Decodes a UDP payload.  Never reads outside `udp_payload`.  Does not check
// the ICRC (that needs the IP header; see icrc.hpp).  Returns false and sets
// `err` on a malformed packet; `out` is only written on success.
// Checks, in this order: at least BTH + ICRC bytes (truncated), a known
// opcode (unknown_opcode), TVer 0 (bad_version), header_len + ICRC bytes
// (truncated), no data on an opcode without kPayload (unexpected_payload),
// PadCnt <= data bytes and data bytes a multiple of 4 (bad_pad; IBA 9.2:
// PadCnt pads the payload so that it ends on a 4-byte boundary).  Reserved fields are
// not checked (IBA: ignored on receive); CNP's 16 reserved bytes are skipped.
bool decode(std::span<const uint8_t> udp_payload, Packet& out, DecodeError& err) noexcept;

// Writes the BTH and every extension header the opcode (h.bth.opcode) calls
// for into `out` and returns the number of bytes written, or 0 if `out` is
// too small or the opcode is unknown.  kMaxHeaderLen bytes always suffice.
// Reserved fields are written as zero; PadCnt and TVer are written as given
// (masked to their widths): the caller sets h.bth.pad = pad_for(payload).
size_t encode_headers(const Headers& h, std::span<uint8_t> out) noexcept;

// Pad bytes needed after `payload_len` bytes of payload.
inline constexpr uint8_t pad_for(size_t payload_len) noexcept { return uint8_t((4 - (payload_len & 3)) & 3); }

// Length of the whole UDP payload (BTH .. ICRC) of a packet of opcode `i`
// carrying `payload_len` bytes of payload.
inline constexpr size_t udp_payload_len(const OpcodeInfo& i, size_t payload_len) noexcept {
  return i.header_len + payload_len + pad_for(payload_len) + kIcrcLen;
}

}  // namespace uroce::wire
