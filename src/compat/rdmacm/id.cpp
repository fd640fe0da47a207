// rdma_cm ids and connections: create/destroy, bind, resolve, listen,
// get_request, connect, accept, reject, establish, disconnect, notify,
// rdma_init_qp_attr, options, ports, devices; the multicast and ECE calls
// (not provided: EOPNOTSUPP).
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "rdmacm.hpp"

namespace uroce::rdmacm {
namespace {

cm::QpType qp_type_of_ps(rdma_port_space ps) {
  return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? cm::QpType::ud : cm::QpType::rc;
}

// The id's fields after an operation of the application's thread.
void sync_fields(CmId& c) {
  Library& l = *lib();
  refresh(c, cm_of(l).view(c.core), l);
}

std::span<const uint8_t> private_of(const rdma_conn_param* p) {
  if (!p || !p->private_data || !p->private_data_len) return {};
  return {static_cast<const uint8_t*>(p->private_data), p->private_data_len};
}

// Responder resources / initiator depth: RDMA_MAX_* means the device's
// limit; more than it is an error.
bool depth(uint8_t asked, uint8_t max, uint8_t fallback, uint8_t& out) {
  if (asked == RDMA_MAX_RESP_RES) {
    out = std::min(fallback, max);
    return true;
  }
  if (asked > max) return false;
  out = asked;
  return true;
}

}  // namespace

int create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps, cm::QpType qp_type) {
  Library* l = lib();
  if (!l) return -1;
  if (!id) return fail("rdma_create_id", EINVAL, "no id pointer");
  auto* c = new CmId{};
  if (channel) {
    c->chan = to_channel(channel);
  } else {
    c->chan = new_channel(true);
    c->sync = true;
    if (!c->chan) {
      delete c;
      return fail("rdma_create_id", errno, "eventfd failed");
    }
  }
  c->id.channel = &c->chan->ch;
  c->id.context = context;
  c->id.ps = ps;
  c->id.qp_type = static_cast<ibv_qp_type>(qp_type);  // verbs::QpType has ibv_qp_type's values
  c->core = cm_of(*l).create_id(c, uint16_t(ps), qp_type);
  *id = &c->id;
  return 0;
}

}  // namespace uroce::rdmacm

using namespace uroce;
using namespace uroce::rdmacm;

// ------------------------------------------------------------------ ids

UROCE_C_API int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  switch (ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_UDP:
    case RDMA_PS_IB:
    case RDMA_PS_IPOIB: break;
    default: return fail("rdma_create_id", EINVAL, "unknown port space");
  }
  return create_id(channel, id, context, ps, qp_type_of_ps(ps));
}

UROCE_C_API int rdma_destroy_id(rdma_cm_id* id) {
  if (!id) return fail("rdma_destroy_id", EINVAL, "no id");
  CmId* c = to_cm(id);
  Library& l = *lib();
  cm::Cm& cm = cm_of(l);
  cm.set_qp(c->core, nullptr);
  cm.destroy_id(c->core);  // no event is delivered about it after this
  // Events still queued about it go; requests it never handed out are
  // refused by destroying their ids.
  for (EventBox* b : take_events(*c->chan, c)) {
    CmId* child = to_cm(b->ev.id);
    if (b->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && child != c) {
      cm.destroy_id(child->core);
      if (child->chan != c->chan) retire_channel(child->chan);
      delete child;
    }
    delete b;
  }
  if (c->id.event) {
    rdma_ack_cm_event(c->id.event);
    c->id.event = nullptr;
  }
  {
    std::unique_lock g(c->mu);
    c->cv.wait(g, [c] { return c->outstanding == 0; });
  }
  if (c->chan->internal) retire_channel(c->chan);
  delete c;
  return 0;
}

// ------------------------------------------------------------------ addresses

UROCE_C_API int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  auto ep = endpoint_of(addr);
  if (!ep) return fail("rdma_bind_addr", addr ? EAFNOSUPPORT : EINVAL, "not an IPv4 or IPv6 address");
  CmId* c = to_cm(id);
  if (Status s = cm_of(*lib()).bind(c->core, *ep); !s.ok()) return fail("rdma_bind_addr", s);
  sync_fields(*c);
  return 0;
}

UROCE_C_API int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  (void)timeout_ms;  // resolved at once: RoCEv2 needs no ARP of ours
  auto dst = endpoint_of(dst_addr);
  if (!dst) return fail("rdma_resolve_addr", EINVAL, "no IPv4 or IPv6 destination");
  std::optional<Endpoint> src;
  if (src_addr && src_addr->sa_family != AF_UNSPEC) {
    src = endpoint_of(src_addr);
    if (!src) return fail("rdma_resolve_addr", EAFNOSUPPORT, "source is not an IPv4 or IPv6 address");
  }
  CmId* c = to_cm(id);
  // An id with an event channel may be destroyed by the thread that takes
  // the operation's event as soon as the operation is under way: do not
  // touch it afterwards (its event refreshed its fields).
  const bool sync = c->sync;
  if (Status s = cm_of(*lib()).resolve_addr(c->core, src, *dst); !s.ok()) return fail("rdma_resolve_addr", s);
  if (!sync) return 0;
  sync_fields(*c);
  return wait_event(*c);
}

UROCE_C_API int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  (void)timeout_ms;
  CmId* c = to_cm(id);
  const bool sync = c->sync;  // (see rdma_resolve_addr)
  if (Status s = cm_of(*lib()).resolve_route(c->core); !s.ok()) return fail("rdma_resolve_route", s);
  if (!sync) return 0;
  sync_fields(*c);
  return wait_event(*c);
}

UROCE_C_API int rdma_listen(rdma_cm_id* id, int backlog) {
  CmId* c = to_cm(id);
  if (Status s = cm_of(*lib()).listen(c->core, backlog); !s.ok()) return fail("rdma_listen", s);
  sync_fields(*c);
  return 0;
}

UROCE_C_API __be16 rdma_get_src_port(rdma_cm_id* id) {
  const sockaddr* sa = &id->route.addr.src_addr;
  if (sa->sa_family == AF_INET) return id->route.addr.src_sin.sin_port;
  if (sa->sa_family == AF_INET6) return id->route.addr.src_sin6.sin6_port;
  return 0;
}

UROCE_C_API __be16 rdma_get_dst_port(rdma_cm_id* id) {
  const sockaddr* sa = &id->route.addr.dst_addr;
  if (sa->sa_family == AF_INET) return id->route.addr.dst_sin.sin_port;
  if (sa->sa_family == AF_INET6) return id->route.addr.dst_sin6.sin6_port;
  return 0;
}

UROCE_C_API ibv_context** rdma_get_devices(int* num_devices) {
  Library* l = lib();
  if (!l) return nullptr;
  const auto& devs = devices(*l);
  auto** list = static_cast<ibv_context**>(std::calloc(devs.size() + 1, sizeof(ibv_context*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < devs.size(); ++i) list[i] = devs[i]->ctx;
  if (num_devices) *num_devices = int(devs.size());
  return list;
}

UROCE_C_API void rdma_free_devices(ibv_context** list) { std::free(list); }

// ------------------------------------------------------------------ connections

UROCE_C_API int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  CmId* l = to_cm(listen);
  if (!l->sync) return fail("rdma_get_request", EINVAL, "the listening id has an event channel of its own");
  if (!id) return fail("rdma_get_request", EINVAL, "no id pointer");
  rdma_cm_event* ev;
  if (rdma_get_cm_event(&l->chan->ch, &ev) != 0) return -1;
  if (ev->status || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    const int e = ev->status ? (ev->status < 0 ? -ev->status : ev->status) : EINVAL;
    rdma_ack_cm_event(ev);
    return fail("rdma_get_request", e, "not a connection request");
  }
  CmId* child = to_cm(ev->id);
  if (l->ep_qp_attr) {
    ibv_qp_init_attr attr = *l->ep_qp_attr;
    if (rdma_create_qp(&child->id, l->ep_pd, &attr) != 0) {
      const int e = errno;
      rdma_ack_cm_event(ev);
      rdma_destroy_id(&child->id);
      errno = e;
      return -1;
    }
  }
  child->id.event = ev;  // acknowledged by its next synchronous operation
  *id = &child->id;
  return 0;
}

UROCE_C_API int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  CmId* c = to_cm(id);
  if (!c->dev) return fail("rdma_connect", EINVAL, "the address is not resolved");
  cm::ConnParam p;
  const rdma_conn_param* cp = conn_param;
  const bool ud = id->qp_type == IBV_QPT_UD;
  if (!ud) {
    p.responder_resources = c->dev->max_resp_res;
    p.initiator_depth = c->dev->max_init_depth;
    if (cp && (!depth(cp->responder_resources, c->dev->max_resp_res, c->dev->max_resp_res, p.responder_resources) ||
               !depth(cp->initiator_depth, c->dev->max_init_depth, c->dev->max_init_depth, p.initiator_depth)))
      return fail("rdma_connect", EINVAL, "responder_resources or initiator_depth above the device's limit");
  }
  if (cp) {
    p.flow_control = cp->flow_control;
    p.retry_count = cp->retry_count;
    p.rnr_retry_count = cp->rnr_retry_count;
    p.srq = cp->srq;
    p.qp_num = cp->qp_num;
    p.private_data = private_of(cp);
  }
  const bool sync = c->sync;  // (see rdma_resolve_addr)
  if (Status s = cm_of(*lib()).connect(c->core, p); !s.ok()) return fail("rdma_connect", s);
  return sync ? wait_event(*c) : 0;
}

UROCE_C_API int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  CmId* c = to_cm(id);
  if (!c->dev) return fail("rdma_accept", EINVAL, "not a connection request");
  cm::ConnParam p;
  const rdma_conn_param* cp = conn_param;
  const bool ud = id->qp_type == IBV_QPT_UD;
  if (!ud) {
    const uint8_t asked_rr = cp ? cp->responder_resources : uint8_t(RDMA_MAX_RESP_RES);
    const uint8_t asked_id = cp ? cp->initiator_depth : uint8_t(RDMA_MAX_INIT_DEPTH);
    if (!depth(asked_rr, c->dev->max_resp_res, c->req_responder_resources, p.responder_resources) ||
        !depth(asked_id, c->dev->max_init_depth, c->req_initiator_depth, p.initiator_depth))
      return fail("rdma_accept", EINVAL, "responder_resources or initiator_depth above the device's limit");
  }
  if (cp) {
    p.flow_control = cp->flow_control;
    p.rnr_retry_count = cp->rnr_retry_count;
    p.srq = cp->srq;
    p.qp_num = cp->qp_num;
    p.private_data = private_of(cp);
  }
  if (c->id.event && c->sync) {  // the request, from rdma_get_request
    rdma_ack_cm_event(c->id.event);
    c->id.event = nullptr;
  }
  const bool sync = c->sync;  // (see rdma_resolve_addr)
  if (Status s = cm_of(*lib()).accept(c->core, p); !s.ok()) return fail("rdma_accept", s);
  return ud || !sync ? 0 : wait_event(*c);
}

UROCE_C_API int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  CmId* c = to_cm(id);
  std::span<const uint8_t> pd;
  if (private_data && private_data_len) pd = {static_cast<const uint8_t*>(private_data), private_data_len};
  if (Status s = cm_of(*lib()).reject(c->core, pd); !s.ok()) return fail("rdma_reject", s);
  return 0;
}

UROCE_C_API int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

UROCE_C_API int rdma_establish(rdma_cm_id* id) {
  CmId* c = to_cm(id);
  if (Status s = cm_of(*lib()).establish(c->core); !s.ok()) return fail("rdma_establish", s);
  return 0;
}

UROCE_C_API int rdma_disconnect(rdma_cm_id* id) {
  CmId* c = to_cm(id);
  const bool sync = c->sync;  // (see rdma_resolve_addr)
  bool follows = false;
  if (Status s = cm_of(*lib()).disconnect(c->core, &follows); !s.ok()) return fail("rdma_disconnect", s);
  return follows && sync ? wait_event(*c) : 0;
}

UROCE_C_API int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  (void)id;
  (void)event;  // the RTU, or its retransmission, establishes the connection
  return 0;
}

// ------------------------------------------------------------------ QP attributes

namespace {

void to_ibv(const cm::QpAttrs& a, ibv_qp_attr& o) {
  using namespace cm::qp_mask;
  o.qp_state = ibv_qp_state(uint8_t(a.qp_state));
  if (a.mask & kPathMtu) o.path_mtu = ibv_mtu(a.path_mtu);
  if (a.mask & kQkey) o.qkey = a.qkey;
  if (a.mask & kRqPsn) o.rq_psn = a.rq_psn;
  if (a.mask & kSqPsn) o.sq_psn = a.sq_psn;
  if (a.mask & kDestQpn) o.dest_qp_num = a.dest_qp_num;
  if (a.mask & kAccessFlags) o.qp_access_flags = a.qp_access_flags;
  if (a.mask & kPkeyIndex) o.pkey_index = a.pkey_index;
  if (a.mask & kPort) o.port_num = a.port_num;
  if (a.mask & kMaxQpRdAtomic) o.max_rd_atomic = a.max_rd_atomic;
  if (a.mask & kMaxDestRdAtomic) o.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (a.mask & kMinRnrTimer) o.min_rnr_timer = a.min_rnr_timer;
  if (a.mask & kTimeout) o.timeout = a.timeout;
  if (a.mask & kRetryCnt) o.retry_cnt = a.retry_cnt;
  if (a.mask & kRnrRetry) o.rnr_retry = a.rnr_retry;
  if (a.mask & kAv) {
    std::memset(&o.ah_attr, 0, sizeof o.ah_attr);
    o.ah_attr.is_global = 1;
    std::memcpy(o.ah_attr.grh.dgid.raw, a.dgid.bytes().data(), 16);
    o.ah_attr.grh.sgid_index = a.sgid_index;
    o.ah_attr.grh.flow_label = a.flow_label;
    o.ah_attr.grh.hop_limit = a.hop_limit;
    o.ah_attr.grh.traffic_class = a.traffic_class;
    o.ah_attr.sl = a.sl;
    o.ah_attr.port_num = a.port_num;
  }
}

}  // namespace

namespace uroce::rdmacm {

Status QpCtl::modify(const cm::QpAttrs& a) noexcept {
  ibv_qp_attr attr{};
  to_ibv(a, attr);
  if (int e = ibv_modify_qp(qp, &attr, int(a.mask)); e != 0)
    return err::from_errno(e, std::string("ibv_modify_qp to state ") + std::to_string(int(a.qp_state)) + " failed");
  return {};
}

}  // namespace uroce::rdmacm

UROCE_C_API int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (!qp_attr || !qp_attr_mask) return fail("rdma_init_qp_attr", EINVAL, "no attribute or mask pointer");
  CmId* c = to_cm(id);
  cm::QpAttrs a;
  a.qp_state = cm::QpState(uint8_t(qp_attr->qp_state));
  if (Status s = cm_of(*lib()).init_qp_attr(c->core, a); !s.ok()) return fail("rdma_init_qp_attr", s);
  to_ibv(a, *qp_attr);
  *qp_attr_mask = int(a.mask);
  return 0;
}

// ------------------------------------------------------------------ options

UROCE_C_API int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  CmId* c = to_cm(id);
  cm::Cm& cm = cm_of(*lib());
  if (!optval) return fail("rdma_set_option", EINVAL, "no option value");
  Status s;
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return fail("rdma_set_option", EINVAL, "TOS is a uint8_t");
        s = cm.set_tos(c->core, *static_cast<uint8_t*>(optval));
        break;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return fail("rdma_set_option", EINVAL, "REUSEADDR is an int");
        s = cm.set_reuseaddr(c->core, *static_cast<int*>(optval) != 0);
        break;
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail("rdma_set_option", EINVAL, "AFONLY is an int");
        s = cm.set_afonly(c->core, *static_cast<int*>(optval) != 0);
        break;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail("rdma_set_option", EINVAL, "ACK_TIMEOUT is a uint8_t");
        s = cm.set_ack_timeout(c->core, *static_cast<uint8_t*>(optval));
        break;
      default: return fail("rdma_set_option", ENOSYS, "unknown RDMA_OPTION_ID option");
    }
  } else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
    if (optlen < sizeof(ibv_path_data)) return fail("rdma_set_option", EINVAL, "no ibv_path_data");
    const ibv_path_record& p = static_cast<ibv_path_data*>(optval)->path;
    uint8_t sg[16], dg[16];
    std::memcpy(sg, &p.sgid, 16);
    std::memcpy(dg, &p.dgid, 16);
    s = cm.set_route(c->core, IpAddr::from_bytes(sg), IpAddr::from_bytes(dg), uint8_t(p.mtu & 0x3f));
    if (s.ok()) refresh(*c, cm.view(c->core), *lib());
  } else {
    return fail("rdma_set_option", ENOSYS, "unknown option level");
  }
  return s.ok() ? 0 : fail("rdma_set_option", s);
}

// ------------------------------------------------------------------ not provided

UROCE_C_API int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
  return fail("rdma_set_local_ece", EOPNOTSUPP, "enhanced connection establishment is not supported");
}

UROCE_C_API int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
  return fail("rdma_get_remote_ece", EOPNOTSUPP, "enhanced connection establishment is not supported");
}
