// The RoCEv2 ICRC (IBA vol. 1 sec. 7.8.1, annex A17.3.3) and its check.
#include "wire/icrc.hpp"

#include <isa-l/crc.h>

#include <algorithm>
#include <cstring>

#include "wire/bytes.hpp"
#include "wire/crc32.hpp"
#include "wire/opcode.hpp"

namespace uroce::wire {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// ISA-L's AVX-512 CRC (crc32_gzip_refl_by16_10) returns with the upper
// halves of the vector registers dirty: it ends without vzeroupper.  Until
// they are cleared, every SSE instruction of ours (built for baseline
// x86-64) pays a transition penalty or a false dependency on them: a 4 KiB
// ICRC took 206 ns instead of 73 ns, and any code run in between (a fault
// guard's struct copies) cost another 150 ns per packet.  vzeroupper costs a
// cycle, but is an illegal instruction without AVX, hence the check.
__attribute__((target("avx"))) void zero_upper() noexcept { __builtin_ia32_vzeroupper(); }
const bool g_has_avx = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") != 0;
}();
#else
void zero_upper() noexcept {}
constexpr bool g_has_avx = false;
#endif

}  // namespace

uint32_t crc32::update(uint32_t crc, std::span<const uint8_t> bytes) noexcept {
  // crc32_gzip_refl(init, ...) inverts `init` on entry and the result on
  // exit, exactly like zlib's crc32(); icrc_test checks the two agree.
  const uint32_t r = crc32_gzip_refl(crc, bytes.data(), bytes.size());
  if (g_has_avx) zero_upper();
  return r;
}

namespace {

constexpr size_t kLrhLen = 8;  // the masked LRH: 8 bytes of 0xFF
constexpr size_t kIpv4Len = 20, kIpv6Len = 40, kUdpLen = 8;
constexpr size_t kMaxPrefix = kLrhLen + kIpv6Len + kUdpLen + kBthLen;

// Offsets, in the ICRC input, of the IPv4 Identification field and of the
// first byte after the flags/fragment offset field that follows it.
constexpr size_t kIdOffset = kLrhLen + 4;
constexpr size_t kAfterFrag = kLrhLen + 8;

// Writes the masked 8 x 0xFF | IP header | UDP header into `buf` and returns
// the length.  Variant fields (TOS/traffic class, TTL/hop limit, IPv4
// checksum, IPv6 flow label, UDP checksum) are all ones.
size_t masked_ip_udp(const IpUdpFields& ip, size_t udp_payload_len, uint8_t* buf) noexcept {
  std::memset(buf, 0xff, kLrhLen);
  uint8_t* p = buf + kLrhLen;
  const uint16_t udp_len = uint16_t(kUdpLen + udp_payload_len);
  if (ip.src.is_v4()) {
    p[0] = 0x45;                                      // version 4, IHL 5
    p[1] = 0xff;                                      // TOS
    store_be16(p + 2, uint16_t(kIpv4Len + udp_len));  // total length
    store_be16(p + 4, ip.ipv4_id);
    store_be16(p + 6, ip.ipv4_frag);
    p[8] = 0xff;           // TTL
    p[9] = 17;             // UDP
    p[10] = p[11] = 0xff;  // header checksum
    std::memcpy(p + 12, ip.src.bytes().data() + 12, 4);
    std::memcpy(p + 16, ip.dst.bytes().data() + 12, 4);
    p += kIpv4Len;
  } else {
    p[0] = 0x6f;                 // version 6, traffic class
    p[1] = p[2] = p[3] = 0xff;   // traffic class, flow label
    store_be16(p + 4, udp_len);  // payload length
    p[6] = 17;                   // next header: UDP
    p[7] = 0xff;                 // hop limit
    std::memcpy(p + 8, ip.src.bytes().data(), 16);
    std::memcpy(p + 24, ip.dst.bytes().data(), 16);
    p += kIpv6Len;
  }
  store_be16(p, ip.src_port);
  store_be16(p + 2, ip.dst_port);
  store_be16(p + 4, udp_len);
  p[6] = p[7] = 0xff;  // UDP checksum
  return size_t(p + kUdpLen - buf);
}

// x^-(8k+32) mod P for the solver.  Bulk traffic repeats one packet length
// (the path MTU), so the last value is kept per thread: the solve then costs
// one multiplication instead of ~20.
uint32_t unshift_for(uint64_t k) noexcept {
  thread_local uint64_t last_k = ~uint64_t{0};
  thread_local uint32_t last_v = 0;
  if (k != last_k) {
    last_v = crc32::x_pow_neg(8 * k + 32);
    last_k = k;
  }
  return last_v;
}

}  // namespace

Icrc::Icrc(const IpUdpFields& ip, size_t udp_payload_len, std::span<const uint8_t, 12> bth) noexcept {
  static_assert(kMaxPrefix <= kStage);
  const size_t n = masked_ip_udp(ip, udp_payload_len, stage_);
  std::memcpy(stage_ + n, bth.data(), kBthLen);
  stage_[n + 4] = 0xff;  // FECN, BECN, Resv6
  staged_ = n + kBthLen;
}

void Icrc::update(std::span<const uint8_t> bytes) noexcept {
  if (staged_ + bytes.size() <= kStage) {
    if (!bytes.empty()) std::memcpy(stage_ + staged_, bytes.data(), bytes.size());
    staged_ += bytes.size();
    return;
  }
  crc_ = crc32::update(crc_, std::span<const uint8_t>(stage_, staged_));
  staged_ = 0;
  if (bytes.size() <= kStage) {
    std::memcpy(stage_, bytes.data(), bytes.size());
    staged_ = bytes.size();
  } else {
    crc_ = crc32::update(crc_, bytes);
  }
}

uint32_t Icrc::value() const noexcept {
  return staged_ == 0 ? crc_ : crc32::update(crc_, std::span<const uint8_t>(stage_, staged_));
}

uint32_t compute_icrc(const IpUdpFields& ip, std::span<const uint8_t> udp_payload) noexcept {
  const size_t covered = udp_payload.size() >= kIcrcLen ? udp_payload.size() - kIcrcLen : 0;
  if (covered >= kBthLen) {
    Icrc c(ip, udp_payload.size(), udp_payload.first<kBthLen>());
    c.update(udp_payload.subspan(kBthLen, covered - kBthLen));
    return c.value();
  }
  // Too short to be a packet; still a well-defined value (BTH byte 4 masked).
  uint8_t buf[kMaxPrefix];
  size_t n = masked_ip_udp(ip, udp_payload.size(), buf);
  std::memcpy(buf + n, udp_payload.data(), covered);
  if (covered > 4) buf[n + 4] = 0xff;
  return crc32::update(0, std::span(buf, n + covered));
}

void put_icrc(uint32_t icrc, uint8_t out[4]) noexcept { store_le32(out, icrc); }
uint32_t get_icrc(const uint8_t in[4]) noexcept { return load_le32(in); }

IcrcCheck verify_icrc(const IpUdpFields& ip, std::span<const uint8_t> udp_payload, uint16_t* solved_id) noexcept {
  if (udp_payload.size() < kBthLen + kIcrcLen) return IcrcCheck::bad;
  const uint32_t carried = get_icrc(udp_payload.data() + udp_payload.size() - kIcrcLen);
  const uint32_t computed = compute_icrc(ip, udp_payload);
  const bool v4 = ip.src.is_v4();
  if (carried == computed) {
    if (v4 && solved_id) *solved_id = ip.ipv4_id;
    return IcrcCheck::ok;
  }
  if (!v4) return IcrcCheck::bad;

  // Same length, so carried ^ computed = D(x) * x^32 mod P, where D is the
  // difference of the two ICRC inputs.  If only the ID and flags/fragment
  // field (bytes 12..15 of the input) differ, D = F(x) * x^(8k) with F the
  // 32-bit XOR of those fields and k the number of input bytes after them.
  // F has degree < 32, so it is recovered exactly: F = diff * x^-(8k+32).
  const size_t input_len = kLrhLen + kIpv4Len + kUdpLen + udp_payload.size() - kIcrcLen;
  const size_t k = input_len - kAfterFrag;
  const uint32_t f = crc32::mul(carried ^ computed, unshift_for(k));
  // In the reflected representation the 4 field bytes appear little-endian.
  static_assert(kAfterFrag - kIdOffset == 4);
  const uint16_t id_xor = uint16_t((f & 0xff) << 8 | ((f >> 8) & 0xff));
  const uint16_t frag_xor = uint16_t(((f >> 16) & 0xff) << 8 | (f >> 24));
  // A sender sets DF or nothing (RoCEv2 is never fragmented): only those two
  // flag values are accepted, which leaves a 2 * 2^-16 chance that a
  // corrupted packet passes as ok_id_solved.
  const uint16_t frag = uint16_t(ip.ipv4_frag ^ frag_xor);
  if (frag != 0x4000 && frag != 0x0000) return IcrcCheck::bad;
  if (solved_id) *solved_id = uint16_t(ip.ipv4_id ^ id_xor);
  return IcrcCheck::ok_id_solved;
}

}  // namespace uroce::wire
