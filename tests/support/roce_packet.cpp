#include "support/roce_packet.hpp"

#include <algorithm>
#include <cstring>

#include "wire/bytes.hpp"
#include "wire/packet.hpp"

namespace uroce::test {

std::vector<uint8_t> make_udp_payload(wire::Headers h, std::span<const uint8_t> payload, const wire::IpUdpFields& ip) {
  const wire::OpcodeInfo& oi = wire::info(h.bth.opcode);
  if (!oi.valid()) return {};
  h.bth.pad = wire::pad_for(payload.size());
  std::vector<uint8_t> out(wire::udp_payload_len(oi, payload.size()), 0);
  const size_t n = wire::encode_headers(h, out);
  std::copy(payload.begin(), payload.end(), out.begin() + long(n));
  const uint32_t icrc = wire::compute_icrc(ip, out);
  wire::put_icrc(icrc, out.data() + out.size() - wire::kIcrcLen);
  return out;
}

std::vector<uint8_t> make_ip_packet(const wire::IpUdpFields& ip, const wire::IpVariantFields& v,
                                    std::span<const uint8_t> udp_payload) {
  std::vector<uint8_t> out(wire::ip_header_len(ip) + wire::kUdpHeaderLen + udp_payload.size());
  const size_t n = wire::write_ip_udp_header(ip, v, udp_payload.size(), out);
  std::copy(udp_payload.begin(), udp_payload.end(), out.begin() + long(n));
  if (!ip.src.is_v4()) {
    const auto udp = std::span(out).subspan(wire::kIpv6HeaderLen);
    wire::store_be16(udp.data() + 6, wire::udp_checksum(ip, udp));
  }
  return out;
}

wire::Headers random_headers(uint8_t opcode, std::mt19937_64& rng) {
  const wire::OpcodeInfo& oi = wire::info(opcode);
  auto u = [&](uint64_t mask) { return rng() & mask; };
  wire::Headers h;
  h.bth.opcode = opcode;
  h.bth.solicited = u(1);
  h.bth.mig_req = u(1);
  h.bth.pkey = uint16_t(u(0xffff));
  h.bth.fecn = u(1);
  h.bth.becn = u(1);
  h.bth.dest_qp = uint32_t(u(wire::kQpnMask));
  h.bth.ack_req = u(1);
  h.bth.psn = uint32_t(u(wire::kPsnMask));
  if (oi.xrceth) h.xrc_srqn = uint32_t(u(0xffffff));
  if (oi.reth) h.reth = {rng(), uint32_t(rng()), uint32_t(rng())};
  if (oi.aeth) h.aeth = {uint8_t(u(0xff)), uint32_t(u(0xffffff))};
  if (oi.atomic_eth) h.atomic = {rng(), uint32_t(rng()), rng(), rng()};
  if (oi.atomic_ack_eth) h.atomic_ack = {rng()};
  if (oi.imm) h.imm = uint32_t(rng());
  if (oi.ieth) h.ieth = uint32_t(rng());
  if (oi.deth) h.deth = {uint32_t(rng()), uint32_t(u(0xffffff))};
  return h;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

}  // namespace uroce::test

namespace uroce::wire {

void PrintTo(const Headers& h, std::ostream* os) {
  const OpcodeInfo& oi = info(h.bth.opcode);
  const Bth& b = h.bth;
  *os << (oi.name ? oi.name : "?") << " se=" << b.solicited << " m=" << b.mig_req << " pad=" << int(b.pad)
      << " tver=" << int(b.tver) << " pkey=" << b.pkey << " f=" << b.fecn << " b=" << b.becn << " qp=" << b.dest_qp
      << " a=" << b.ack_req << " psn=" << b.psn << " xrc=" << h.xrc_srqn << " reth={" << h.reth.va << "," << h.reth.rkey
      << "," << h.reth.length << "} aeth={" << int(h.aeth.syndrome) << "," << h.aeth.msn << "} atomic={" << h.atomic.va
      << "," << h.atomic.rkey << "," << h.atomic.swap_add << "," << h.atomic.compare << "} orig=" << h.atomic_ack.orig
      << " imm=" << h.imm << " ieth=" << h.ieth << " deth={" << h.deth.qkey << "," << h.deth.src_qp << "}";
}

}  // namespace uroce::wire
