// The RoCEv2 Invariant CRC (IBA vol. 1 sec. 7.8.1 and annex A17.3.3).
//
// CRC-32 (IEEE 802.3, as zlib's crc32) over: 8 bytes of 0xFF (the masked LRH),
// the IP header, the UDP header, the BTH and everything after it up to the
// ICRC, with the variant fields set to all ones first: IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; BTH byte 4 (FECN, BECN, Resv6).  Sent least-significant byte first.
//
// Only the IP and UDP fields the ICRC covers are needed, not whole headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "common/ip_addr.hpp"

namespace uroce::wire {

// What the ICRC covers of the IP and UDP headers.
struct IpUdpFields {
  IpAddr src;  // both IPv4 (v4-mapped) or both IPv6
  IpAddr dst;
  uint16_t src_port = 0;
  uint16_t dst_port = 4791;
  uint16_t ipv4_id = 0;         // IPv4 Identification
  uint16_t ipv4_frag = 0x4000;  // IPv4 flags + fragment offset (0x4000 = DF)
};

// Incremental ICRC: construct with the IP/UDP fields, the total UDP payload
// length (BTH .. ICRC inclusive) and the BTH, then feed the rest (extension
// headers, payload pieces, pad) in order.  Small pieces are gathered and
// run through the CRC together: a small packet costs one CRC call, not one
// per piece (each call has a fixed cost of about 100 instructions).
class Icrc {
 public:
  Icrc(const IpUdpFields& ip, size_t udp_payload_len, std::span<const uint8_t, 12> bth) noexcept;
  void update(std::span<const uint8_t> bytes) noexcept;
  uint32_t value() const noexcept;  // the ICRC as a number; put_icrc() writes it

 private:
  static constexpr size_t kStage = 192;
  uint32_t crc_ = 0;       // CRC of the bytes before the staged ones
  size_t staged_ = 0;      // bytes in stage_
  uint8_t stage_[kStage];  // the latest small pieces, not yet in crc_
};

// ICRC of a whole UDP payload (the last 4 bytes, the ICRC itself, excluded).
uint32_t compute_icrc(const IpUdpFields& ip, std::span<const uint8_t> udp_payload) noexcept;

// Writes / reads the 4 ICRC bytes, least-significant byte first.
void put_icrc(uint32_t icrc, uint8_t out[4]) noexcept;
uint32_t get_icrc(const uint8_t in[4]) noexcept;

enum class IcrcCheck : uint8_t {
  ok,            // matches with every covered field known
  ok_id_solved,  // IPv4 only: matches for exactly one IP Identification value
                 // (the receiver cannot see the sender's ID); 16-bit assurance
  bad,
};

// Verifies the ICRC at the end of `udp_payload`.  For IPv4 the sender's IP
// ID is unknown to a UDP socket: the check first assumes ip.ipv4_id and
// ip.ipv4_frag, then solves the CRC for the one 16-bit ID that would make it
// match (the CRC is linear over GF(2)), accepting the flags/fragment field
// only as DF (0x4000) or 0.  A corrupted packet passes as ok_id_solved with
// probability 2^-15.  `*solved_id` (IPv4 only) receives the ID that matched:
// ip.ipv4_id for ok, the solved one for ok_id_solved; untouched otherwise.
// IPv6 has no such field: only ok or bad.  Costs one CRC pass over the
// packet, plus one GF(2) multiplication when the first guess fails (about
// 20 the first time a thread sees a new packet length).
IcrcCheck verify_icrc(const IpUdpFields& ip, std::span<const uint8_t> udp_payload,
                      uint16_t* solved_id = nullptr) noexcept;

}  // namespace uroce::wire
