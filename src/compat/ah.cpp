// Address handles and address vectors: ibv_create_ah, ibv_destroy_ah,
// ibv_init_ah_from_wc and ibv_create_ah_from_wc (reading the IP header a
// UD receive carries in its 40-byte GRH area), ibv_resolve_eth_l2_from_gid
// (not supported: there is no Ethernet layer of our own), and the
// conversions between struct ibv_ah_attr and the core's AhAttr.
#include <cstring>

#include "compat.hpp"

namespace uroce::compat {

void to_core_ah(const Context& ctx, const ibv_ah_attr& in, verbs::AhAttr& out) noexcept {
  out = verbs::AhAttr{};
  out.sl = in.sl;
  out.port_num = in.port_num;
  out.dlid = in.dlid;
  if (in.is_global) {
    out.is_global = true;
    out.dgid = IpAddr::from_bytes(in.grh.dgid.raw);
    out.flow_label = in.grh.flow_label;
    out.sgid_index = in.grh.sgid_index;
    out.hop_limit = in.grh.hop_limit;
    out.traffic_class = in.grh.traffic_class;
    return;
  }
  const auto& gids = ctx.core->config().gids;
  if (in.dlid != 0 && !gids.empty()) {
    // LID routing (see port_lid): the source GID with its low 16 bits
    // replaced by the DLID.
    uint8_t raw[16];
    std::memcpy(raw, gids[0].bytes().data(), 16);
    raw[14] = uint8_t(in.dlid >> 8);
    raw[15] = uint8_t(in.dlid);
    out.is_global = true;
    out.dgid = IpAddr::from_bytes(raw);
    out.sgid_index = 0;
    return;
  }
  out.is_global = false;  // the core says why it cannot route this
}

void from_core_ah(const verbs::AhAttr& in, ibv_ah_attr& out) noexcept {
  std::memset(&out, 0, sizeof out);
  std::memcpy(out.grh.dgid.raw, in.dgid.bytes().data(), 16);
  out.grh.flow_label = in.flow_label;
  out.grh.sgid_index = in.sgid_index;
  out.grh.hop_limit = in.hop_limit;
  out.grh.traffic_class = in.traffic_class;
  out.dlid = in.dlid;
  out.sl = in.sl;
  out.is_global = in.is_global;
  out.port_num = in.port_num;
}

}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

UROCE_C_API ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  Pd* p = checked("ibv_create_ah", pd);
  if (!p) return nullptr;
  verbs::AhAttr a;
  to_core_ah(*p->ctx, *attr, a);
  auto core = verbs::Ah::create(*p->core, a);
  if (!core.ok()) return fail_null<ibv_ah>("ibv_create_ah", core.status());
  auto* h = new Ah{};
  h->core = core->release();
  h->ah.context = pd->context;
  h->ah.pd = pd;
  h->ah.handle = p->ctx->handles.add(ObjKind::ah, h);
  return &h->ah;
}

UROCE_C_API int ibv_destroy_ah(ibv_ah* ah) {
  Ah* h = checked("ibv_destroy_ah", ah);
  if (!h) return errno;
  to_ctx(ah->context)->handles.remove(ObjKind::ah, ah->handle);
  delete h->core;
  delete h;
  return 0;
}

// RoCEv2: the GRH area holds the received packet's IP header (IPv6 in all
// 40 bytes, IPv4 in the last 20).  The reply goes to its source address,
// from the local GID it was sent to.
UROCE_C_API int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                    ibv_ah_attr* ah_attr) {
  const char* verb = "ibv_init_ah_from_wc";
  std::memset(ah_attr, 0, sizeof *ah_attr);
  Context* c = checked(verb, context);
  if (!c) return errno;
  if (port_num != 1) return fail(verb, EINVAL, "port_num must be 1");
  if (!(wc->wc_flags & IBV_WC_GRH) || !grh) return fail(verb, EINVAL, "RoCE needs the GRH of the received message");
  const auto* b = reinterpret_cast<const uint8_t*>(grh);
  IpAddr src, dst;
  if ((b[20] >> 4) == 4) {
    auto v4 = [](const uint8_t* p) { return IpAddr::from_v4(uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]); };
    src = v4(b + 20 + 12);
    dst = v4(b + 20 + 16);
    ah_attr->grh.traffic_class = b[20 + 1];
    ah_attr->grh.hop_limit = 64;
  } else if ((b[0] >> 4) == 6) {
    uint8_t raw[16];
    std::memcpy(raw, b + 8, 16);
    src = IpAddr::from_bytes(raw);
    std::memcpy(raw, b + 24, 16);
    dst = IpAddr::from_bytes(raw);
    ah_attr->grh.traffic_class = uint8_t((b[0] & 0x0f) << 4 | b[1] >> 4);
    ah_attr->grh.flow_label = uint32_t(b[1] & 0x0f) << 16 | uint32_t(b[2]) << 8 | b[3];
    ah_attr->grh.hop_limit = 64;
  } else {
    return fail(verb, EINVAL, "the GRH area holds no IPv4 or IPv6 header");
  }
  const auto& gids = c->core->config().gids;
  size_t index = 0;
  while (index < gids.size() && gids[index] != dst) ++index;
  if (index == gids.size()) return fail(verb, EINVAL, "the message was not sent to a GID of this device");
  std::memcpy(ah_attr->grh.dgid.raw, src.bytes().data(), 16);
  ah_attr->grh.sgid_index = uint8_t(index);
  ah_attr->is_global = 1;
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->port_num = port_num;
  return 0;
}

UROCE_C_API ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (!checked("ibv_create_ah_from_wc", pd) || ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
    return nullptr;
  return ibv_create_ah(pd, &attr);
}

UROCE_C_API int ibv_resolve_eth_l2_from_gid(ibv_context* /*context*/, ibv_ah_attr* /*attr*/,
                                            uint8_t /*eth_mac*/[ETHERNET_LL_SIZE], uint16_t* /*vid*/) {
  return fail("ibv_resolve_eth_l2_from_gid", EOPNOTSUPP,
              "uroce sends through the kernel's IP stack: no MAC to resolve");
}
