// Decoding and encoding of BTH + extension headers, driven by the opcode
// table (IBA vol. 1 sec. 9.2-9.5).
#include "wire/packet.hpp"

#include <cstring>

#include "wire/bytes.hpp"

namespace uroce::wire {

namespace {

// BTH byte 1: S | M | PadCnt(2) | TVer(4); byte 4: F | B | Resv6; byte 8: A | Resv7.
constexpr uint8_t kSolicited = 0x80, kMigReq = 0x40, kFecn = 0x80, kBecn = 0x40, kAckReq = 0x80;
constexpr unsigned kPadShift = 4;
constexpr uint8_t kPadMask = 0x3, kTverMask = 0xf;

// Reads BTH and extension headers from `p`, which decode() has checked
// holds oi.header_len bytes; the opcode table places every header inside
// that length (opcode_test), so the loads below need no checks of their own
// (the hot path: as encode_headers, the length is checked once).
void read_headers(const uint8_t* p, const OpcodeInfo& oi, Headers& out) noexcept {
  Bth& b = out.bth;
  b.opcode = p[0];
  b.solicited = p[1] & kSolicited;
  b.mig_req = p[1] & kMigReq;
  b.pad = (p[1] >> kPadShift) & kPadMask;
  b.tver = p[1] & kTverMask;
  b.pkey = load_be16(p + 2);
  b.fecn = p[4] & kFecn;
  b.becn = p[4] & kBecn;
  b.dest_qp = load_be24(p + 5);
  b.ack_req = p[8] & kAckReq;
  b.psn = load_be24(p + 9);
  if (oi.xrceth) out.xrc_srqn = load_be24(p + oi.xrceth + 1);
  if (oi.deth) {
    out.deth.qkey = load_be32(p + oi.deth);
    out.deth.src_qp = load_be24(p + oi.deth + 5);
  }
  if (oi.reth) {
    out.reth.va = load_be64(p + oi.reth);
    out.reth.rkey = load_be32(p + oi.reth + 8);
    out.reth.length = load_be32(p + oi.reth + 12);
  }
  if (oi.atomic_eth) {
    out.atomic.va = load_be64(p + oi.atomic_eth);
    out.atomic.rkey = load_be32(p + oi.atomic_eth + 8);
    out.atomic.swap_add = load_be64(p + oi.atomic_eth + 12);
    out.atomic.compare = load_be64(p + oi.atomic_eth + 20);
  }
  if (oi.aeth) {
    out.aeth.syndrome = p[oi.aeth];
    out.aeth.msn = load_be24(p + oi.aeth + 1);
  }
  if (oi.atomic_ack_eth) out.atomic_ack.orig = load_be64(p + oi.atomic_ack_eth);
  if (oi.imm) std::memcpy(&out.imm, p + oi.imm, kImmLen);  // ImmDt: opaque, kept in wire order
  if (oi.ieth) out.ieth = load_be32(p + oi.ieth);
}

}  // namespace

const char* to_string(DecodeError e) noexcept {
  switch (e) {
    case DecodeError::truncated: return "truncated";
    case DecodeError::unknown_opcode: return "unknown_opcode";
    case DecodeError::bad_version: return "bad_version";
    case DecodeError::unexpected_payload: return "unexpected_payload";
    case DecodeError::bad_pad: return "bad_pad";
  }
  return "?";
}

bool decode(std::span<const uint8_t> p, Packet& out, DecodeError& err) noexcept {
  auto fail = [&](DecodeError e) {
    err = e;
    return false;
  };
  if (p.size() < kBthLen + kIcrcLen) return fail(DecodeError::truncated);
  const OpcodeInfo& oi = info(p[0]);
  if (!oi.valid()) return fail(DecodeError::unknown_opcode);
  if (p[1] & kTverMask) return fail(DecodeError::bad_version);
  if (p.size() < size_t(oi.header_len) + kIcrcLen) return fail(DecodeError::truncated);

  // Payload + pad: everything between the headers and the ICRC.
  const size_t data = p.size() - oi.header_len - kIcrcLen;
  if (data != 0 && !oi.has(op::kPayload)) return fail(DecodeError::unexpected_payload);
  const uint8_t pad = (p[1] >> kPadShift) & kPadMask;
  if (pad > data || (data & 3) != 0) return fail(DecodeError::bad_pad);

  // Checked: from here on `out` is written, and decoding cannot fail.
  out.hdr = Headers{};
  read_headers(p.data(), oi, out.hdr);
  out.info = &oi;
  out.payload = p.subspan(oi.header_len, data - pad);
  out.icrc = load_le32(p.data() + p.size() - kIcrcLen);
  return true;
}

size_t encode_headers(const Headers& h, std::span<uint8_t> out) noexcept {
  const OpcodeInfo& oi = info(h.bth.opcode);
  if (!oi.valid() || out.size() < oi.header_len) return 0;
  // The length is checked once; the stores below are unchecked (hot path).
  uint8_t* p = out.data();
  const Bth& b = h.bth;
  p[0] = b.opcode;
  p[1] = uint8_t((b.solicited ? kSolicited : 0) | (b.mig_req ? kMigReq : 0) | (b.pad & kPadMask) << kPadShift |
                 (b.tver & kTverMask));
  store_be16(p + 2, b.pkey);
  p[4] = uint8_t((b.fecn ? kFecn : 0) | (b.becn ? kBecn : 0));
  store_be24(p + 5, b.dest_qp);
  p[8] = b.ack_req ? kAckReq : 0;
  store_be24(p + 9, b.psn);

  if (oi.xrceth) {
    p[oi.xrceth] = 0;
    store_be24(p + oi.xrceth + 1, h.xrc_srqn);
  }
  if (oi.deth) {
    store_be32(p + oi.deth, h.deth.qkey);
    p[oi.deth + 4] = 0;
    store_be24(p + oi.deth + 5, h.deth.src_qp);
  }
  if (oi.reth) {
    store_be64(p + oi.reth, h.reth.va);
    store_be32(p + oi.reth + 8, h.reth.rkey);
    store_be32(p + oi.reth + 12, h.reth.length);
  }
  if (oi.atomic_eth) {
    store_be64(p + oi.atomic_eth, h.atomic.va);
    store_be32(p + oi.atomic_eth + 8, h.atomic.rkey);
    store_be64(p + oi.atomic_eth + 12, h.atomic.swap_add);
    store_be64(p + oi.atomic_eth + 20, h.atomic.compare);
  }
  if (oi.aeth) {
    p[oi.aeth] = h.aeth.syndrome;
    store_be24(p + oi.aeth + 1, h.aeth.msn);
  }
  if (oi.atomic_ack_eth) store_be64(p + oi.atomic_ack_eth, h.atomic_ack.orig);
  if (oi.imm) std::memcpy(p + oi.imm, &h.imm, kImmLen);
  if (oi.ieth) store_be32(p + oi.ieth, h.ieth);
  if (oi.flags & op::kCnpPad) std::memset(p + kBthLen, 0, kCnpPadLen);
  return oi.header_len;
}

}  // namespace uroce::wire
