// Building whole RoCEv2 packets in tests: headers + payload + pad + ICRC,
// optionally wrapped in IP + UDP.
#pragma once

#include <cstdint>
#include <ostream>
#include <random>
#include <span>
#include <vector>

#include "wire/headers.hpp"
#include "wire/icrc.hpp"
#include "wire/ip_header.hpp"

namespace uroce::test {

// The UDP payload of one packet: h's headers (h.bth.pad set to
// pad_for(payload)), the payload, zero pad and the ICRC for `ip`.
// Empty if h.bth.opcode is unknown.
std::vector<uint8_t> make_udp_payload(wire::Headers h, std::span<const uint8_t> payload, const wire::IpUdpFields& ip);

// IP header + UDP header + `udp_payload`; over IPv6 the UDP checksum is
// filled in, over IPv4 it is 0.
std::vector<uint8_t> make_ip_packet(const wire::IpUdpFields& ip, const wire::IpVariantFields& v,
                                    std::span<const uint8_t> udp_payload);

// Random values in every header that `opcode` carries (fields of absent
// headers stay default, so decode(encode(h)) == h is a full comparison).
// bth.pad is left 0 and bth.tver 0.
wire::Headers random_headers(uint8_t opcode, std::mt19937_64& rng);

// Random bytes.
std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng);

}  // namespace uroce::test

namespace uroce::wire {
// GoogleTest printers, so a failed EXPECT_EQ shows the fields.
void PrintTo(const Headers& h, std::ostream* os);
}  // namespace uroce::wire
