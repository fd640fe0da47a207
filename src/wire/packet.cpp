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

// Each reader gets a Reader over exactly its header; the lengths were checked
// against header_len before, so these can only fail on a table bug.
bool read_bth(Reader r, Bth& b) noexcept {
  uint8_t b1 = 0, b4 = 0, b8 = 0;
  bool ok = r.u8(b.opcode) && r.u8(b1) && r.u16(b.pkey) && r.u8(b4) && r.u24(b.dest_qp) && r.u8(b8) && r.u24(b.psn);
  b.solicited = b1 & kSolicited;
  b.mig_req = b1 & kMigReq;
  b.pad = (b1 >> kPadShift) & kPadMask;
  b.tver = b1 & kTverMask;
  b.fecn = b4 & kFecn;
  b.becn = b4 & kBecn;
  b.ack_req = b8 & kAckReq;
  return ok;
}

bool read_headers(std::span<const uint8_t> h, const OpcodeInfo& oi, Headers& out) noexcept {
  auto at = [&](uint8_t off) { return Reader(h.subspan(off)); };
  bool ok = read_bth(Reader(h), out.bth);
  if (oi.xrceth) {
    Reader r = at(oi.xrceth);
    ok &= r.skip(1) && r.u24(out.xrc_srqn);
  }
  if (oi.deth) {
    Reader r = at(oi.deth);
    ok &= r.u32(out.deth.qkey) && r.skip(1) && r.u24(out.deth.src_qp);
  }
  if (oi.reth) {
    Reader r = at(oi.reth);
    ok &= r.u64(out.reth.va) && r.u32(out.reth.rkey) && r.u32(out.reth.length);
  }
  if (oi.atomic_eth) {
    Reader r = at(oi.atomic_eth);
    ok &= r.u64(out.atomic.va) && r.u32(out.atomic.rkey) && r.u64(out.atomic.swap_add) && r.u64(out.atomic.compare);
  }
  if (oi.aeth) {
    Reader r = at(oi.aeth);
    ok &= r.u8(out.aeth.syndrome) && r.u24(out.aeth.msn);
  }
  if (oi.atomic_ack_eth) ok &= at(oi.atomic_ack_eth).u64(out.atomic_ack.orig);
  if (oi.imm) {
    // ImmDt: opaque bytes, kept in wire (memory) order.
    std::span<const uint8_t> imm;
    ok &= at(oi.imm).bytes(kImmLen, imm);
    if (ok) std::memcpy(&out.imm, imm.data(), kImmLen);
  }
  if (oi.ieth) ok &= at(oi.ieth).u32(out.ieth);
  return ok;
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

  Packet pkt;
  if (!read_headers(p.first(oi.header_len), oi, pkt.hdr)) return fail(DecodeError::truncated);
  pkt.info = &oi;
  pkt.payload = p.subspan(oi.header_len, data - pad);
  pkt.icrc = load_le32(p.data() + p.size() - kIcrcLen);
  out = pkt;
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
