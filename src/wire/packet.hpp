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
bool decode(std::span<const uint8_t> udp_payload, Packet& out, DecodeError& err) noexcept;

// Writes the BTH and every extension header the opcode (h.bth.opcode) calls
// for into `out` and returns the number of bytes written, or 0 if `out` is
// too small or the opcode is unknown.  kMaxHeaderLen bytes always suffice.
size_t encode_headers(const Headers& h, std::span<uint8_t> out) noexcept;

// Pad bytes needed after `payload_len` bytes of payload.
inline constexpr uint8_t pad_for(size_t payload_len) noexcept {
  return uint8_t((4 - (payload_len & 3)) & 3);
}

}  // namespace uroce::wire
