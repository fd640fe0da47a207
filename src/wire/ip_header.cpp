// IPv4 / IPv6 + UDP headers: build and parse (RFC 791, 8200, 768).
#include "wire/ip_header.hpp"

#include <cstring>

#include "wire/bytes.hpp"

namespace uroce::wire {

namespace {

// One's complement sum of big-endian 16-bit words (odd tail padded with 0).
uint32_t sum16(std::span<const uint8_t> b, uint32_t acc = 0) noexcept {
  size_t i = 0;
  for (; i + 1 < b.size(); i += 2) acc += load_be16(b.data() + i);
  if (i < b.size()) acc += uint32_t(b[i]) << 8;
  return acc;
}

uint16_t fold(uint32_t acc) noexcept {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return uint16_t(acc);
}

IpAddr v4_from(const uint8_t* p) noexcept { return IpAddr::from_v4(load_be32(p)); }

IpAddr v6_from(const uint8_t* p) noexcept {
  uint8_t raw[16];
  std::memcpy(raw, p, 16);
  return IpAddr::from_bytes(raw);
}

}  // namespace

uint16_t ipv4_header_checksum(std::span<const uint8_t> header) noexcept { return uint16_t(~fold(sum16(header))); }

uint16_t udp_checksum(const IpUdpFields& f, std::span<const uint8_t> udp) noexcept {
  // Pseudo header: addresses, protocol, UDP length (RFC 768 / RFC 8200 8.1).
  uint32_t acc = 0;
  if (f.src.is_v4()) {
    acc = sum16(std::span(f.src.bytes()).subspan(12), acc);
    acc = sum16(std::span(f.dst.bytes()).subspan(12), acc);
  } else {
    acc = sum16(f.src.bytes(), acc);
    acc = sum16(f.dst.bytes(), acc);
  }
  acc += kIpProtoUdp;
  acc += uint32_t(udp.size() & 0xffff) + uint32_t(udp.size() >> 16);
  const uint16_t c = uint16_t(~fold(sum16(udp, acc)));
  return c == 0 ? 0xffff : c;
}

size_t write_ip_header(const IpUdpFields& f, const IpVariantFields& v, size_t udp_payload_len,
                       std::span<uint8_t> out) noexcept {
  const size_t udp_len = kUdpHeaderLen + udp_payload_len;
  Writer w(out);
  bool ok;
  if (f.src.is_v4()) {
    ok = w.u8(0x45) && w.u8(v.tos) && w.u16(uint16_t(kIpv4HeaderLen + udp_len)) && w.u16(f.ipv4_id) &&
         w.u16(f.ipv4_frag) && w.u8(v.ttl) && w.u8(kIpProtoUdp) && w.u16(0) &&
         w.bytes(std::span(f.src.bytes()).subspan(12)) && w.bytes(std::span(f.dst.bytes()).subspan(12));
    if (ok) store_be16(out.data() + 10, ipv4_header_checksum(out.first(kIpv4HeaderLen)));
  } else {
    ok = w.u32(6u << 28 | uint32_t(v.tos) << 20 | (v.flow_label & 0xfffff)) && w.u16(uint16_t(udp_len)) &&
         w.u8(kIpProtoUdp) && w.u8(v.ttl) && w.bytes(f.src.bytes()) && w.bytes(f.dst.bytes());
  }
  return ok ? w.position() : 0;
}

size_t write_ip_udp_header(const IpUdpFields& f, const IpVariantFields& v, size_t udp_payload_len,
                           std::span<uint8_t> out) noexcept {
  const size_t n = write_ip_header(f, v, udp_payload_len, out);
  if (n == 0) return 0;
  Writer w(out.subspan(n));
  if (!(w.u16(f.src_port) && w.u16(f.dst_port) && w.u16(uint16_t(kUdpHeaderLen + udp_payload_len)) && w.u16(0)))
    return 0;
  return n + kUdpHeaderLen;
}

void write_grh(const IpUdpFields& f, const IpVariantFields& v, size_t udp_payload_len,
               std::span<uint8_t, kGrhLen> out) noexcept {
  std::memset(out.data(), 0, kGrhLen);
  const size_t at = kGrhLen - ip_header_len(f);
  write_ip_header(f, v, udp_payload_len, std::span<uint8_t>(out).subspan(at));
}

std::optional<ParsedIpUdp> parse_ip_udp(std::span<const uint8_t> l3) noexcept {
  ParsedIpUdp r;
  Reader rd(l3);
  uint8_t ver_ihl = 0;
  if (!rd.u8(ver_ihl)) return std::nullopt;
  std::span<const uint8_t> after_ip;  // from the UDP header to the end of the IP packet
  if (ver_ihl >> 4 == 4) {
    const size_t ihl = size_t(ver_ihl & 0xf) * 4;
    uint16_t total = 0;
    uint8_t proto = 0;
    std::span<const uint8_t> addrs;
    if (ihl < kIpv4HeaderLen || !rd.u8(r.variant.tos) || !rd.u16(total) || !rd.u16(r.fields.ipv4_id) ||
        !rd.u16(r.fields.ipv4_frag) || !rd.u8(r.variant.ttl) || !rd.u8(proto) || !rd.u16(r.ip_checksum) ||
        !rd.bytes(8, addrs))
      return std::nullopt;
    if (proto != kIpProtoUdp || total < ihl || total > l3.size()) return std::nullopt;
    if ((r.fields.ipv4_frag & 0x3fff) != 0) return std::nullopt;  // MF or offset: a fragment
    r.fields.src = v4_from(addrs.data());
    r.fields.dst = v4_from(addrs.data() + 4);
    r.ip_header_len = ihl;
    after_ip = l3.subspan(ihl, total - ihl);
  } else if (ver_ihl >> 4 == 6) {
    uint8_t b1 = 0, next = 0;
    uint16_t fl_lo = 0, plen = 0;
    std::span<const uint8_t> addrs;
    if (!rd.u8(b1) || !rd.u16(fl_lo) || !rd.u16(plen) || !rd.u8(next) || !rd.u8(r.variant.ttl) || !rd.bytes(32, addrs))
      return std::nullopt;
    if (next != kIpProtoUdp || plen > rd.remaining()) return std::nullopt;
    r.variant.tos = uint8_t((ver_ihl & 0xf) << 4 | b1 >> 4);
    r.variant.flow_label = uint32_t(b1 & 0xf) << 16 | fl_lo;
    r.fields.src = v6_from(addrs.data());
    r.fields.dst = v6_from(addrs.data() + 16);
    r.fields.ipv4_id = 0;
    r.fields.ipv4_frag = 0;
    r.ip_header_len = kIpv6HeaderLen;
    after_ip = l3.subspan(kIpv6HeaderLen, plen);
  } else {
    return std::nullopt;
  }
  Reader u(after_ip);
  uint16_t udp_len = 0;
  if (!u.u16(r.fields.src_port) || !u.u16(r.fields.dst_port) || !u.u16(udp_len) || !u.u16(r.udp_checksum))
    return std::nullopt;
  if (udp_len < kUdpHeaderLen || udp_len > after_ip.size()) return std::nullopt;
  r.udp_datagram = after_ip.first(udp_len);
  r.udp_payload = r.udp_datagram.subspan(kUdpHeaderLen);
  return r;
}

}  // namespace uroce::wire
