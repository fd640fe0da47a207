#include "cm/mad.hpp"

#include <cstdio>
#include <cstring>

#include "wire/bytes.hpp"

namespace uroce::cm {
namespace {

using wire::Reader;
using wire::Writer;

// The attribute data of a whole MAD, or an empty span if it is too short.
std::span<const uint8_t> data_of(std::span<const uint8_t> mad) noexcept {
  if (mad.size() < kMadSize) return {};
  return mad.subspan(kMadHeaderSize, kCmDataSize);
}

template <size_t N>
bool read_array(Reader& r, std::array<uint8_t, N>& a) noexcept {
  return r.copy(std::span<uint8_t>(a.data(), N));
}
template <size_t N>
bool write_array(Writer& w, const std::array<uint8_t, N>& a) noexcept {
  return w.bytes(std::span<const uint8_t>(a.data(), N));
}

bool read_gid(Reader& r, IpAddr& g) noexcept {
  uint8_t raw[16];
  if (!r.copy(raw)) return false;
  g = IpAddr::from_bytes(raw);
  return true;
}
bool write_gid(Writer& w, const IpAddr& g) noexcept { return w.bytes(std::span<const uint8_t>(g.bytes().data(), 16)); }

// A 24-bit value and an 8-bit one in one word.
void split24(uint32_t word, uint32_t& hi24, uint8_t& lo8) noexcept {
  hi24 = word >> 8;
  lo8 = uint8_t(word);
}
uint32_t join24(uint32_t hi24, uint8_t lo8) noexcept { return (hi24 & 0xffffff) << 8 | lo8; }

void write_header(const MadHeader& h, MadBuf& out) noexcept {
  Writer w(out);
  w.u8(h.base_version);
  w.u8(h.mgmt_class);
  w.u8(h.class_version);
  w.u8(h.method);
  w.u16(h.status);
  w.u16(h.class_specific);
  w.u64(h.tid);
  w.u16(h.attr_id);
  w.u16(h.reserved);
  w.u32(h.attr_mod);
}

std::span<uint8_t> data_out(MadBuf& out) noexcept {
  return std::span<uint8_t>(out.data() + kMadHeaderSize, kCmDataSize);
}

bool read_path(Reader& r, ReqPath& p) noexcept {
  uint32_t fl;
  uint8_t b42, b43;
  if (!r.u16(p.local_lid) || !r.u16(p.remote_lid) || !read_gid(r, p.local_gid) || !read_gid(r, p.remote_gid) ||
      !r.u32(fl) || !r.u8(p.traffic_class) || !r.u8(p.hop_limit) || !r.u8(b42) || !r.u8(b43))
    return false;
  p.flow_label = fl >> 12;
  p.packet_rate = uint8_t(fl & 0x3f);
  p.sl = b42 >> 4;
  p.subnet_local = (b42 >> 3) & 1;
  p.local_ack_timeout = b43 >> 3;
  return true;
}

bool write_path(Writer& w, const ReqPath& p) noexcept {
  const uint32_t fl = (p.flow_label & 0xfffff) << 12 | (p.packet_rate & 0x3f);
  return w.u16(p.local_lid) && w.u16(p.remote_lid) && write_gid(w, p.local_gid) && write_gid(w, p.remote_gid) &&
         w.u32(fl) && w.u8(p.traffic_class) && w.u8(p.hop_limit) &&
         w.u8(uint8_t((p.sl & 0xf) << 4 | (p.subnet_local ? 1 : 0) << 3)) &&
         w.u8(uint8_t((p.local_ack_timeout & 0x1f) << 3));
}

template <class M, class Body>
bool decode_body(std::span<const uint8_t> mad, M& out, Body body) noexcept {
  std::span<const uint8_t> d = data_of(mad);
  if (d.empty()) return false;
  Reader r(d);
  M m;
  if (!body(r, m)) return false;
  out = m;
  return true;
}

template <class M, class Body>
void encode_body(MadHeader h, AttrId id, const M& m, MadBuf& out, Body body) noexcept {
  out.fill(0);
  h.attr_id = uint16_t(id);
  write_header(h, out);
  Writer w(data_out(out));
  body(w, m);  // cannot run short: every layout is exactly 232 bytes
}

}  // namespace

const char* to_string(AttrId id) noexcept {
  switch (id) {
    case AttrId::class_port_info: return "ClassPortInfo";
    case AttrId::req: return "REQ";
    case AttrId::mra: return "MRA";
    case AttrId::rej: return "REJ";
    case AttrId::rep: return "REP";
    case AttrId::rtu: return "RTU";
    case AttrId::dreq: return "DREQ";
    case AttrId::drep: return "DREP";
    case AttrId::sidr_req: return "SIDR_REQ";
    case AttrId::sidr_rep: return "SIDR_REP";
    case AttrId::lap: return "LAP";
    case AttrId::apr: return "APR";
  }
  return "?";
}

bool decode_header(std::span<const uint8_t> mad, MadHeader& out) noexcept {
  Reader r(mad);
  MadHeader h;
  if (!r.u8(h.base_version) || !r.u8(h.mgmt_class) || !r.u8(h.class_version) || !r.u8(h.method) || !r.u16(h.status) ||
      !r.u16(h.class_specific) || !r.u64(h.tid) || !r.u16(h.attr_id) || !r.u16(h.reserved) || !r.u32(h.attr_mod))
    return false;
  out = h;
  return true;
}

bool is_cm_send(const MadHeader& h) noexcept {
  return h.base_version == kMadBaseVersion && h.mgmt_class == kMgmtClassCm && h.class_version == kCmClassVersion &&
         h.method == kMethodSend;
}

// ---------------------------------------------------------------- REQ

bool decode(std::span<const uint8_t> mad, Req& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Req& m) {
    uint32_t w32;
    uint8_t b;
    if (!r.u32(m.local_comm_id) || !r.skip(4) || !r.u64(m.service_id) || !r.u64(m.local_ca_guid) || !r.skip(4) ||
        !r.u32(m.local_qkey))
      return false;
    if (!r.u32(w32)) return false;
    split24(w32, m.local_qpn, m.responder_resources);
    if (!r.u32(w32)) return false;
    split24(w32, m.local_eecn, m.initiator_depth);
    if (!r.u32(w32)) return false;
    split24(w32, m.remote_eecn, b);
    m.remote_cm_response_timeout = b >> 3;
    m.transport_service_type = (b >> 1) & 3;
    m.e2e_flow_control = b & 1;
    if (!r.u32(w32)) return false;
    split24(w32, m.starting_psn, b);
    m.local_cm_response_timeout = b >> 3;
    m.retry_count = b & 7;
    if (!r.u16(m.pkey) || !r.u8(b)) return false;
    m.path_mtu = b >> 4;
    m.rdc_exists = (b >> 3) & 1;
    m.rnr_retry_count = b & 7;
    if (!r.u8(b)) return false;
    m.max_cm_retries = b >> 4;
    m.srq = (b >> 3) & 1;
    m.extended_transport_type = b & 7;
    return read_path(r, m.primary) && read_path(r, m.alternate) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Req& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::req, m, out, [](Writer& w, const Req& m) {
    w.u32(m.local_comm_id);
    w.zeros(4);
    w.u64(m.service_id);
    w.u64(m.local_ca_guid);
    w.zeros(4);
    w.u32(m.local_qkey);
    w.u32(join24(m.local_qpn, m.responder_resources));
    w.u32(join24(m.local_eecn, m.initiator_depth));
    w.u32(join24(m.remote_eecn, uint8_t((m.remote_cm_response_timeout & 0x1f) << 3 |
                                        (m.transport_service_type & 3) << 1 | (m.e2e_flow_control ? 1 : 0))));
    w.u32(join24(m.starting_psn, uint8_t((m.local_cm_response_timeout & 0x1f) << 3 | (m.retry_count & 7))));
    w.u16(m.pkey);
    w.u8(uint8_t((m.path_mtu & 0xf) << 4 | (m.rdc_exists ? 1 : 0) << 3 | (m.rnr_retry_count & 7)));
    w.u8(uint8_t((m.max_cm_retries & 0xf) << 4 | (m.srq ? 1 : 0) << 3 | (m.extended_transport_type & 7)));
    write_path(w, m.primary);
    write_path(w, m.alternate);
    write_array(w, m.private_data);
  });
}

// ---------------------------------------------------------------- REP

bool decode(std::span<const uint8_t> mad, Rep& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Rep& m) {
    uint32_t w32;
    uint8_t b;
    if (!r.u32(m.local_comm_id) || !r.u32(m.remote_comm_id) || !r.u32(m.local_qkey) || !r.u32(w32)) return false;
    split24(w32, m.local_qpn, b);
    if (!r.u32(w32)) return false;
    split24(w32, m.local_eecn, b);
    if (!r.u32(w32)) return false;
    split24(w32, m.starting_psn, b);
    if (!r.u8(m.responder_resources) || !r.u8(m.initiator_depth) || !r.u8(b)) return false;
    m.target_ack_delay = b >> 3;
    m.failover_accepted = (b >> 1) & 3;
    m.e2e_flow_control = b & 1;
    if (!r.u8(b)) return false;
    m.rnr_retry_count = b >> 5;
    m.srq = (b >> 4) & 1;
    return r.u64(m.local_ca_guid) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Rep& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::rep, m, out, [](Writer& w, const Rep& m) {
    w.u32(m.local_comm_id);
    w.u32(m.remote_comm_id);
    w.u32(m.local_qkey);
    w.u32(join24(m.local_qpn, 0));
    w.u32(join24(m.local_eecn, 0));
    w.u32(join24(m.starting_psn, 0));
    w.u8(m.responder_resources);
    w.u8(m.initiator_depth);
    w.u8(uint8_t((m.target_ack_delay & 0x1f) << 3 | (m.failover_accepted & 3) << 1 | (m.e2e_flow_control ? 1 : 0)));
    w.u8(uint8_t((m.rnr_retry_count & 7) << 5 | (m.srq ? 1 : 0) << 4));
    w.u64(m.local_ca_guid);
    write_array(w, m.private_data);
  });
}

// ---------------------------------------------------------------- RTU, DREQ, DREP

bool decode(std::span<const uint8_t> mad, Rtu& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Rtu& m) {
    return r.u32(m.local_comm_id) && r.u32(m.remote_comm_id) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Rtu& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::rtu, m, out, [](Writer& w, const Rtu& m) {
    w.u32(m.local_comm_id);
    w.u32(m.remote_comm_id);
    write_array(w, m.private_data);
  });
}

bool decode(std::span<const uint8_t> mad, Dreq& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Dreq& m) {
    uint32_t w32;
    uint8_t b;
    if (!r.u32(m.local_comm_id) || !r.u32(m.remote_comm_id) || !r.u32(w32)) return false;
    split24(w32, m.remote_qpn, b);
    return read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Dreq& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::dreq, m, out, [](Writer& w, const Dreq& m) {
    w.u32(m.local_comm_id);
    w.u32(m.remote_comm_id);
    w.u32(join24(m.remote_qpn, 0));
    write_array(w, m.private_data);
  });
}

bool decode(std::span<const uint8_t> mad, Drep& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Drep& m) {
    return r.u32(m.local_comm_id) && r.u32(m.remote_comm_id) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Drep& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::drep, m, out, [](Writer& w, const Drep& m) {
    w.u32(m.local_comm_id);
    w.u32(m.remote_comm_id);
    write_array(w, m.private_data);
  });
}

// ---------------------------------------------------------------- REJ, MRA

bool decode(std::span<const uint8_t> mad, Rej& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Rej& m) {
    uint8_t b8, b9;
    if (!r.u32(m.local_comm_id) || !r.u32(m.remote_comm_id) || !r.u8(b8) || !r.u8(b9) || !r.u16(m.reason)) return false;
    m.msg_rejected = MsgRef(b8 >> 6);
    m.reject_info_length = b9 >> 1;
    return read_array(r, m.ari) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Rej& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::rej, m, out, [](Writer& w, const Rej& m) {
    w.u32(m.local_comm_id);
    w.u32(m.remote_comm_id);
    w.u8(uint8_t((uint8_t(m.msg_rejected) & 3) << 6));
    w.u8(uint8_t((m.reject_info_length & 0x7f) << 1));
    w.u16(m.reason);
    write_array(w, m.ari);
    write_array(w, m.private_data);
  });
}

bool decode(std::span<const uint8_t> mad, Mra& out) noexcept {
  return decode_body(mad, out, [](Reader& r, Mra& m) {
    uint8_t b8, b9;
    if (!r.u32(m.local_comm_id) || !r.u32(m.remote_comm_id) || !r.u8(b8) || !r.u8(b9)) return false;
    m.msg_mraed = MsgRef(b8 >> 6);
    m.service_timeout = b9 >> 3;
    return read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const Mra& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::mra, m, out, [](Writer& w, const Mra& m) {
    w.u32(m.local_comm_id);
    w.u32(m.remote_comm_id);
    w.u8(uint8_t((uint8_t(m.msg_mraed) & 3) << 6));
    w.u8(uint8_t((m.service_timeout & 0x1f) << 3));
    write_array(w, m.private_data);
  });
}

// ---------------------------------------------------------------- SIDR

bool decode(std::span<const uint8_t> mad, SidrReq& out) noexcept {
  return decode_body(mad, out, [](Reader& r, SidrReq& m) {
    return r.u32(m.request_id) && r.u16(m.pkey) && r.skip(2) && r.u64(m.service_id) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const SidrReq& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::sidr_req, m, out, [](Writer& w, const SidrReq& m) {
    w.u32(m.request_id);
    w.u16(m.pkey);
    w.zeros(2);
    w.u64(m.service_id);
    write_array(w, m.private_data);
  });
}

bool decode(std::span<const uint8_t> mad, SidrRep& out) noexcept {
  return decode_body(mad, out, [](Reader& r, SidrRep& m) {
    uint32_t w32;
    uint8_t b;
    if (!r.u32(m.request_id) || !r.u8(m.status) || !r.u8(m.additional_info_length) || !r.skip(2) || !r.u32(w32))
      return false;
    split24(w32, m.qpn, b);
    return r.u64(m.service_id) && r.u32(m.qkey) && read_array(r, m.class_port_info) && read_array(r, m.private_data);
  });
}

void encode(MadHeader h, const SidrRep& m, MadBuf& out) noexcept {
  encode_body(h, AttrId::sidr_rep, m, out, [](Writer& w, const SidrRep& m) {
    w.u32(m.request_id);
    w.u8(m.status);
    w.u8(m.additional_info_length);
    w.zeros(2);
    w.u32(join24(m.qpn, 0));
    w.u64(m.service_id);
    w.u32(m.qkey);
    write_array(w, m.class_port_info);
    write_array(w, m.private_data);
  });
}

// ---------------------------------------------------------------- ClassPortInfo

// ClassPortInfo (IBA 13.4.8.1): 0 BaseVersion (8) | ClassVersion (8) |
// CapabilityMask (16); 4 CapabilityMask2 (27) | RespTimeValue (5); ...
void encode_class_port_info(MadHeader h, uint8_t resp_time_value, MadBuf& out) noexcept {
  out.fill(0);
  h.attr_id = uint16_t(AttrId::class_port_info);
  write_header(h, out);
  if (h.method == kMethodGetResp) {
    uint8_t* d = out.data() + kMadHeaderSize;
    d[0] = kMadBaseVersion;
    d[1] = kCmClassVersion;
    d[7] = resp_time_value & 0x1f;
  }
}

// ---------------------------------------------------------------- IP CM header

bool decode_ip_header(std::span<const uint8_t> pd, IpCmHeader& out) noexcept {
  if (pd.size() < kIpCmHeaderSize) return false;
  IpCmHeader h;
  h.major = pd[0] >> 4;
  h.minor = pd[0] & 0xf;
  h.ip_version = pd[1] >> 4;
  h.src_port = wire::load_be16(&pd[2]);
  auto addr = [&](size_t off, IpAddr& a) {
    if (h.ip_version == 4) {
      a = IpAddr::from_v4(wire::load_be32(&pd[off + 12]));
    } else {
      uint8_t raw[16];
      std::memcpy(raw, &pd[off], 16);
      a = IpAddr::from_bytes(raw);
    }
  };
  if (h.ip_version != 4 && h.ip_version != 6) return false;
  addr(4, h.src);
  addr(20, h.dst);
  out = h;
  return true;
}

bool encode_ip_header(const IpCmHeader& h, std::span<uint8_t> out) noexcept {
  if (out.size() < kIpCmHeaderSize) return false;
  std::memset(out.data(), 0, kIpCmHeaderSize);
  out[0] = uint8_t((h.major & 0xf) << 4 | (h.minor & 0xf));
  out[1] = uint8_t((h.ip_version & 0xf) << 4);
  wire::store_be16(&out[2], h.src_port);
  auto addr = [&](size_t off, const IpAddr& a) {
    if (h.ip_version == 4)
      wire::store_be32(&out[off + 12], a.v4());
    else
      std::memcpy(&out[off], a.bytes().data(), 16);
  };
  addr(4, h.src);
  addr(20, h.dst);
  return true;
}

// ---------------------------------------------------------------- describe

std::string describe(std::span<const uint8_t> mad) {
  MadHeader h;
  if (!decode_header(mad, h)) return "short MAD (" + std::to_string(mad.size()) + " bytes)";
  char buf[200];
  if (h.mgmt_class != kMgmtClassCm) {
    std::snprintf(buf, sizeof buf, "MAD class 0x%02x attr 0x%04x", h.mgmt_class, h.attr_id);
    return buf;
  }
  const AttrId id = AttrId(h.attr_id);
  uint32_t a = 0, b = 0;
  if (mad.size() >= kMadSize) {
    a = wire::load_be32(mad.data() + kMadHeaderSize);
    b = wire::load_be32(mad.data() + kMadHeaderSize + 4);
  }
  std::snprintf(buf, sizeof buf, "%s tid 0x%016llx comm 0x%08x/0x%08x", to_string(id),
                static_cast<unsigned long long>(h.tid), a, b);
  return buf;
}

}  // namespace uroce::cm
