// IPv4 / IPv6 + UDP headers around a RoCEv2 UDP payload: building them (the
// GRH area of UD receives, tests, pcap files) and parsing them (tests that
// read captures).  The NIC itself sends over a UDP socket and never builds
// these on the data path.
//
//  IPv4 header (RFC 791), 20 bytes, no options
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |Version|  IHL  |   TOS (DSCP|ECN)  |        Total Length       |
//  |         Identification        |Flags|    Fragment Offset      |
//  |  TTL          |   Protocol    |        Header Checksum        |
//  |                       Source Address                          |
//  |                    Destination Address                        |
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  IPv6 header (RFC 8200), 40 bytes
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  |Version| Traffic Class |           Flow Label                  |
//  |         Payload Length        |  Next Header  |   Hop Limit   |
//  |                Source Address (128) | Destination Address (128)
//  +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//  UDP header (RFC 768), 8 bytes: Source Port | Dest Port | Length | Checksum
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/icrc.hpp"

namespace uroce::wire {

inline constexpr uint16_t kRoceUdpPort = 4791;  // IANA, annex A17.2
inline constexpr size_t kIpv4HeaderLen = 20;
inline constexpr size_t kIpv6HeaderLen = 40;
inline constexpr size_t kUdpHeaderLen = 8;
inline constexpr size_t kGrhLen = 40;  // the GRH area in front of UD receive data
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kIpv4DontFragment = 0x4000;

// The IP fields the ICRC does not cover (icrc.hpp masks them to ones).
struct IpVariantFields {
  uint8_t tos = 0;          // IPv4 TOS / IPv6 traffic class: DSCP << 2 | ECN
  uint8_t ttl = 64;         // IPv4 TTL / IPv6 hop limit
  uint32_t flow_label = 0;  // IPv6 only, 20 bits
};

inline size_t ip_header_len(const IpUdpFields& f) noexcept { return f.src.is_v4() ? kIpv4HeaderLen : kIpv6HeaderLen; }

// Writes the IP header of a UDP datagram carrying `udp_payload_len` bytes:
// IPv4 (no options, with its header checksum, ID and flags from `f`) or
// IPv6 (no extension headers).  Returns the bytes written, 0 if `out` is
// too small.
size_t write_ip_header(const IpUdpFields& f, const IpVariantFields& v, size_t udp_payload_len,
                       std::span<uint8_t> out) noexcept;

// The IP header followed by the UDP header, whose checksum is left 0 (legal
// for IPv4 and what RoCEv2 senders use; over IPv6 fill it in with
// udp_checksum() once the payload is in place).
size_t write_ip_udp_header(const IpUdpFields& f, const IpVariantFields& v, size_t udp_payload_len,
                           std::span<uint8_t> out) noexcept;

// The 40-byte GRH area that a UD receive carries in front of the data.  With
// RoCEv2 it holds the IP header of the packet: IPv6 fills all 40 bytes;
// IPv4 leaves bytes 0..19 zero and puts the 20-byte header in 20..39.
void write_grh(const IpUdpFields& f, const IpVariantFields& v, size_t udp_payload_len,
               std::span<uint8_t, kGrhLen> out) noexcept;

// Internet checksum of an IPv4 header whose checksum field is zero: the value
// to store there.  Over a header with a correct checksum the result is 0.
uint16_t ipv4_header_checksum(std::span<const uint8_t> header) noexcept;

// UDP checksum (RFC 768; RFC 8200 sec. 8.1 for IPv6) of `udp_datagram`
// (header + payload) whose checksum field is zero: the value to store there
// (a computed 0 is sent as 0xffff).
uint16_t udp_checksum(const IpUdpFields& f, std::span<const uint8_t> udp_datagram) noexcept;

// An IP + UDP header taken apart.
struct ParsedIpUdp {
  IpUdpFields fields;                     // what the ICRC covers
  IpVariantFields variant;                // what it does not
  uint16_t ip_checksum = 0;               // IPv4 header checksum, as carried
  uint16_t udp_checksum = 0;              // as carried
  size_t ip_header_len = 0;               // 20 (+ options) or 40
  std::span<const uint8_t> udp_datagram;  // UDP header + payload
  std::span<const uint8_t> udp_payload;   // trimmed to the UDP length
};

// Parses an IPv4 or IPv6 packet carrying UDP.  Bytes after the IP total
// length (Ethernet padding) are ignored.  Refuses (nullopt) anything else:
// other protocols, IPv6 extension headers, IPv4 fragments, lengths that do
// not fit.  Never reads outside `l3`.
std::optional<ParsedIpUdp> parse_ip_udp(std::span<const uint8_t> l3) noexcept;

}  // namespace uroce::wire
