// rdma_join_multicast(_ex) / rdma_leave_multicast: UD multicast over
// rdma_cm.  RoCE has no subnet administrator to ask: a join attaches the
// id's QP to the group's GID (ibv_attach_mcast: the device joins the IP
// group) and reports RDMA_CM_EVENT_MULTICAST_JOIN at once with what a
// sender needs (an address handle to the group, QPN 0xFFFFFF, the port
// space's Q_Key), the user's context in param.ud.private_data, as
// librdmacm reports it.
#include <cstring>

#include "cm/mad.hpp"
#include "rdmacm.hpp"

namespace uroce::rdmacm {
namespace {

int join(const char* fn, rdma_cm_id* id, const sockaddr* addr, void* context, bool send_only) {
  if (!id) return fail(fn, EINVAL, "no id");
  CmId* c = to_cm(id);
  const auto group = endpoint_of(addr);
  if (!group || !group->addr.is_multicast()) return fail(fn, EINVAL, "not a multicast address");
  if (id->ps != RDMA_PS_UDP && id->ps != RDMA_PS_IPOIB)
    return fail(fn, EINVAL, "multicast needs an id of the UDP or IPoIB port space");
  if (!id->verbs) return fail(fn, EINVAL, "the id has no device yet (rdma_bind_addr or rdma_resolve_addr first)");
  const auto src = endpoint_of(&id->route.addr.src_addr);
  if (src && src->addr.is_v4() != group->addr.is_v4())
    return fail(fn, EINVAL, "the group is not of the device address's family");
  for (const auto& j : c->joins)
    if (j.group == group->addr) return fail(fn, EADDRINUSE, "the id already joined this group");
  ibv_gid gid;
  std::memcpy(gid.raw, group->addr.bytes().data(), 16);
  bool attached = false;
  if (id->qp && !send_only) {
    if (const int e = ibv_attach_mcast(id->qp, &gid, 0); e != 0) return fail(fn, e, "ibv_attach_mcast failed");
    attached = true;
  }
  c->joins.push_back({group->addr, attached});
  auto* box = new EventBox{};
  rdma_cm_event& ev = box->ev;
  ev.id = id;
  ev.event = RDMA_CM_EVENT_MULTICAST_JOIN;
  ev.status = 0;
  rdma_ud_param& u = ev.param.ud;
  u.private_data = context;
  u.private_data_len = 0;
  u.ah_attr.is_global = 1;
  u.ah_attr.grh.dgid = gid;
  u.ah_attr.grh.sgid_index = 0;
  u.ah_attr.grh.hop_limit = 1;
  u.ah_attr.port_num = id->port_num ? id->port_num : 1;
  u.qp_num = 0xffffff;
  u.qkey = cm::kRdmaUdpQkey;
  box->owner = c;
  const bool sync = c->sync;
  push_event(*c->chan, box);
  return sync ? wait_event(*c) : 0;
}

}  // namespace

UROCE_C_API int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  return join("rdma_join_multicast", id, addr, context, false);
}

UROCE_C_API int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  if (!attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
    return fail("rdma_join_multicast_ex", EINVAL, "no address in the join attributes");
  bool send_only = false;
  if (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) {
    if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
      return fail("rdma_join_multicast_ex", EINVAL, "unknown join flags");
    send_only = attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  }
  return join("rdma_join_multicast_ex", id, attr->addr, context, send_only);
}

UROCE_C_API int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  if (!id) return fail("rdma_leave_multicast", EINVAL, "no id");
  CmId* c = to_cm(id);
  const auto group = endpoint_of(addr);
  if (!group) return fail("rdma_leave_multicast", EINVAL, "no address");
  for (auto it = c->joins.begin(); it != c->joins.end(); ++it)
    if (it->group == group->addr) {
      if (it->attached && id->qp) {
        ibv_gid gid;
        std::memcpy(gid.raw, group->addr.bytes().data(), 16);
        (void)ibv_detach_mcast(id->qp, &gid, 0);  // (the QP may have been destroyed and detached meanwhile)
      }
      c->joins.erase(it);
      return 0;
    }
  return fail("rdma_leave_multicast", EADDRNOTAVAIL, "the id did not join this group");
}

}  // namespace uroce::rdmacm
