// UROCE_COPY_WRITE and UROCE_COPY_NAK payloads (copy.hpp).
#include "wire/copy.hpp"

#include <algorithm>

#include "wire/bytes.hpp"

namespace uroce::wire {
namespace {

constexpr std::array<uint8_t, 4> kRequestMagic{'u', 'R', 'C', 'W'};
constexpr std::array<uint8_t, 4> kNakMagic{'u', 'R', 'C', 'N'};
constexpr std::array<uint8_t, 4> kDoneMagic{'u', 'R', 'C', 'D'};

bool magic_ok(Reader& r, const std::array<uint8_t, 4>& magic) noexcept {
  std::span<const uint8_t> m;
  uint8_t version = 0;
  return r.bytes(magic.size(), m) && std::equal(m.begin(), m.end(), magic.begin()) && r.u8(version) &&
         version == kCopyVersion;
}

}  // namespace

size_t write_copy_request(const CopyRequest& w, std::span<uint8_t> out) noexcept {
  if (w.ranges.size() > kCopyMaxRanges) return 0;
  Writer wr(out);
  const bool ok = wr.bytes(kRequestMagic) && wr.u8(kCopyVersion) && wr.u8(w.flags) &&
                  wr.u16(uint16_t(w.ranges.size())) && wr.u32(w.packets) && wr.u32(w.bytes) && wr.u64(w.va) &&
                  wr.u32(w.rkey) && wr.u32(w.length) && wr.u32(w.imm) && wr.u32(w.gate);
  if (!ok) return 0;
  for (const CopyRange& c : w.ranges)
    if (!wr.u64(c.addr) || !wr.u32(c.len)) return 0;
  return wr.position();
}

std::optional<CopyRequest> parse_copy_request(std::span<const uint8_t> payload) {
  Reader r(payload);
  CopyRequest w;
  uint16_t n = 0;
  if (!magic_ok(r, kRequestMagic) || !r.u8(w.flags) || !r.u16(n) || !r.u32(w.packets) || !r.u32(w.bytes) ||
      !r.u64(w.va) || !r.u32(w.rkey) || !r.u32(w.length) || !r.u32(w.imm) || !r.u32(w.gate))
    return std::nullopt;
  if (w.flags & ~(kCopyFirst | kCopyLast | kCopyImm) || n == 0 || n > kCopyMaxRanges || w.packets == 0 ||
      r.remaining() != size_t(n) * kCopyRangeLen)
    return std::nullopt;
  uint64_t total = 0;
  w.ranges.resize(n);
  for (CopyRange& c : w.ranges) {
    (void)r.u64(c.addr);
    (void)r.u32(c.len);
    if (c.len == 0 || c.addr + c.len < c.addr) return std::nullopt;
    total += c.len;
  }
  if (total != w.bytes) return std::nullopt;
  return w;
}

std::array<uint8_t, kCopyNakLen> copy_nak_payload(CopyNakReason why) noexcept {
  std::array<uint8_t, kCopyNakLen> p{};
  std::copy(kNakMagic.begin(), kNakMagic.end(), p.begin());
  p[4] = kCopyVersion;
  p[5] = uint8_t(why);
  return p;
}

std::optional<CopyNakReason> parse_copy_nak(std::span<const uint8_t> payload) noexcept {
  Reader r(payload);
  uint8_t why = 0;
  if (payload.size() != kCopyNakLen || !magic_ok(r, kNakMagic) || !r.u8(why)) return std::nullopt;
  if (why != uint8_t(CopyNakReason::refused) && why != uint8_t(CopyNakReason::requester_fault) &&
      why != uint8_t(CopyNakReason::stale))
    return std::nullopt;
  return CopyNakReason(why);
}

std::array<uint8_t, kCopyDoneLen> copy_done_payload(uint32_t packets) noexcept {
  std::array<uint8_t, kCopyDoneLen> p{};
  Writer w(p);
  (void)(w.bytes(kDoneMagic) && w.u8(kCopyVersion) && w.zeros(3) && w.u32(packets));
  return p;
}

std::optional<uint32_t> parse_copy_done(std::span<const uint8_t> payload) noexcept {
  Reader r(payload);
  uint32_t packets = 0;
  if (payload.size() != kCopyDoneLen || !magic_ok(r, kDoneMagic) || !r.skip(3) || !r.u32(packets) || packets == 0)
    return std::nullopt;
  return packets;
}

}  // namespace uroce::wire
