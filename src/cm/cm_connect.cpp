// Cm: making a connection -- connect (RC/UC: REQ; UD: SIDR_REQ), accept
// (REP / SIDR_REP), reject (REJ), establish (IBA 12.9).
#include <algorithm>
#include <cerrno>

#include "cm/cm.hpp"
#include "cm/conn.hpp"
#include "cm/fsm.hpp"
#include "common/log.hpp"

namespace uroce::cm {

// ------------------------------------------------------------------ connect

Status Cm::connect(Id* id, const ConnParam& p) {
  OpLock g(*this);
  const fsm::Row* row = row_for(id, id->conn_, fsm::Ev::connect);
  if (!row)
    return err::inval(std::string("rdma_connect: the route is not resolved (the id is ") + to_string(id->state_) + ")");
  return row->act == fsm::Act::send_sidr_req ? connect_ud(*id, p, *row) : connect_rc(*id, p, *row);
}

Status Cm::connect_rc(Id& id, const ConnParam& p, const fsm::Row& row) {
  const uint32_t qpn = id.qp_ ? id.qp_->qpn() : p.qp_num;
  if (qpn == 0) return err::inval("rdma_connect: the id has no QP and conn_param gives no qp_num");
  const uint64_t sid = service_id(id.ps_, id.dst_.port);
  const size_t hdr = is_ip_service(sid) ? kIpCmHeaderSize : 0;
  if (p.private_data.size() > kReqPrivate - hdr)
    return err::inval("rdma_connect: " + std::to_string(p.private_data.size()) + " bytes of private data (at most " +
                      std::to_string(kReqPrivate - hdr) + ")");
  Conn& c = *new_conn(&id, id.port_, true);
  c.remote_gid = id.dgid_;
  c.service_id = sid;
  c.peer = ids_.request_endpoint(id.dst_.addr, id.dgid_, sid);
  c.local_qpn = qpn;
  c.path_mtu = id.mtu_;
  c.max_dest_rd_atomic = p.responder_resources;
  c.max_rd_atomic = p.initiator_depth;
  c.retry_count = std::min<uint8_t>(p.retry_count, 7);
  c.rnr_retry = std::min<uint8_t>(p.rnr_retry_count, 7);
  c.ack_timeout = id.ack_timeout_.value_or(cfg_.ack_timeout);
  c.traffic_class = id.tos_;
  c.tid = new_tid(c.local_id);

  Req r;
  r.local_comm_id = c.local_id;
  r.service_id = sid;
  r.local_ca_guid = id.port_->node_guid();
  r.local_qpn = qpn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.remote_cm_response_timeout = cfg_.cm_response_timeout;
  // XRC: service type 3 with extended transport type 1 (IBA 12.6.5).
  r.transport_service_type = id.qp_type_ == QpType::uc ? 1 : id.qp_type_ == QpType::xrc_send ? 3 : 0;
  r.extended_transport_type = id.qp_type_ == QpType::xrc_send ? 1 : 0;
  r.e2e_flow_control = p.flow_control != 0;
  r.starting_psn = c.local_psn;
  r.local_cm_response_timeout = cfg_.cm_response_timeout;
  r.retry_count = c.retry_count;
  r.path_mtu = c.path_mtu;
  r.rnr_retry_count = c.rnr_retry;
  r.max_cm_retries = cfg_.max_cm_retries;
  r.srq = p.srq;
  r.primary.local_lid = r.primary.remote_lid = 0xffff;  // RoCE: permissive LIDs
  r.primary.local_gid = c.local_gid;
  r.primary.remote_gid = c.remote_gid;
  r.primary.flow_label = c.flow_label;
  r.primary.traffic_class = c.traffic_class;
  r.primary.hop_limit = c.hop_limit;
  r.primary.local_ack_timeout = c.ack_timeout;
  if (hdr) {
    IpCmHeader ip;
    ip.ip_version = id.src_.addr.is_v4() ? 4 : 6;
    ip.src_port = id.src_.port;
    ip.src = id.src_.addr;
    ip.dst = id.dst_.addr;
    encode_ip_header(ip, r.private_data);
  }
  copy_private(r.private_data, hdr, p.private_data);
  MadHeader h;
  h.tid = c.tid;
  encode(h, r, c.out);
  enter(&id, &c, row);
  send_or_seek(c);
  return {};
}

Status Cm::connect_ud(Id& id, const ConnParam& p, const fsm::Row& row) {
  const uint64_t sid = service_id(id.ps_, id.dst_.port);
  const size_t hdr = is_ip_service(sid) ? kIpCmHeaderSize : 0;
  if (p.private_data.size() > kSidrReqPrivate - hdr)
    return err::inval("rdma_connect: " + std::to_string(p.private_data.size()) + " bytes of private data (at most " +
                      std::to_string(kSidrReqPrivate - hdr) + ")");
  Conn& c = *new_conn(&id, id.port_, true);
  c.ud = true;
  c.remote_gid = id.dgid_;
  c.service_id = sid;
  c.peer = ids_.request_endpoint(id.dst_.addr, id.dgid_, sid);
  c.tid = new_tid(c.local_id);
  SidrReq r;
  r.request_id = c.local_id;
  r.service_id = sid;
  if (hdr) {
    IpCmHeader ip;
    ip.ip_version = id.src_.addr.is_v4() ? 4 : 6;
    ip.src_port = id.src_.port;
    ip.src = id.src_.addr;
    ip.dst = id.dst_.addr;
    encode_ip_header(ip, r.private_data);
  }
  copy_private(r.private_data, hdr, p.private_data);
  MadHeader h;
  h.tid = c.tid;
  encode(h, r, c.out);
  enter(&id, &c, row);
  send_or_seek(c);
  return {};
}

// A request goes out at once, unless it is for an address of this host on
// which the directory shows no listener yet: then it waits (polling the
// directory) for the listener to appear, at most no_listener_grace.
void Cm::send_or_seek(Conn& c) noexcept {
  const bool local = ids_.port_for_address(c.remote_gid) != nullptr;
  if (local && c.peer.port == kRoceV2Port && cfg_.no_listener_grace.count() > 0 &&
      c.seek_until == Clock::time_point{}) {
    c.seek_until = now() + cfg_.no_listener_grace;
    c.has_out = true;
    c.deadline = now() + kSeekInterval;
    woke_ = true;
    return;
  }
  c.seek_until = {};
  send_retried(c, mad_timeout(cfg_.cm_response_timeout), cfg_.max_cm_retries);
}

// ------------------------------------------------------------------ accept / reject / establish

Status Cm::accept(Id* id, const ConnParam& p) {
  OpLock g(*this);
  Conn* c = id->conn_;
  const uint32_t qpn = id->qp_ ? id->qp_->qpn() : p.qp_num;
  const fsm::Row* row = c ? row_for(id, c, fsm::Ev::accept) : nullptr;
  if (row && row->act == fsm::Act::accept_sidr) {
    if (p.private_data.size() > kSidrRepPrivate)
      return err::inval("rdma_accept: " + std::to_string(p.private_data.size()) + " bytes of private data (at most " +
                        std::to_string(kSidrRepPrivate) + ")");
    if (qpn == 0) return err::inval("rdma_accept: the id has no QP and conn_param gives no qp_num");
    SidrRep rep;
    rep.request_id = c->remote_id;
    rep.status = uint8_t(SidrStatus::ok);
    rep.qpn = qpn;
    rep.service_id = c->service_id;
    rep.qkey = p.qkey ? p.qkey : qkey_for(id->ps_);
    copy_private(rep.private_data, 0, p.private_data);
    MadHeader h;
    h.tid = c->tid;
    encode(h, rep, c->out);
    c->has_out = true;
    send(*c, c->out);
    enter(id, c, *row);  // closed, kept to answer a repeated SIDR_REQ; the id is established
    return {};
  }
  if (!row)
    return err::inval(std::string("rdma_accept: no connection request to accept (the id is ") + to_string(id->state_) +
                      ")");
  if (qpn == 0) return err::inval("rdma_accept: the id has no QP and conn_param gives no qp_num");
  if (p.private_data.size() > kRepPrivate)
    return err::inval("rdma_accept: " + std::to_string(p.private_data.size()) + " bytes of private data (at most " +
                      std::to_string(kRepPrivate) + ")");
  c->local_qpn = qpn;
  c->max_dest_rd_atomic = p.responder_resources;
  c->max_rd_atomic = p.initiator_depth;
  if (id->ack_timeout_) c->ack_timeout = *id->ack_timeout_;
  if (id->qp_) {
    if (Status s = qp_to_rts(*id, *c); !s.ok()) {
      send_rej(*c->port, c->peer, c->tid, c->local_id, c->remote_id, MsgRef::req, RejReason::no_resources);
      enter(id, c, *row, /*failed=*/true);
      return s;
    }
  }
  Rep rep;
  rep.local_comm_id = c->local_id;
  rep.remote_comm_id = c->remote_id;
  rep.local_qpn = qpn;
  rep.starting_psn = c->local_psn;
  rep.responder_resources = p.responder_resources;
  rep.initiator_depth = p.initiator_depth;
  rep.target_ack_delay = c->port->ack_delay();
  rep.e2e_flow_control = p.flow_control != 0;
  rep.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  rep.srq = p.srq;
  rep.local_ca_guid = c->port->node_guid();
  copy_private(rep.private_data, 0, p.private_data);
  MadHeader h;
  h.tid = c->tid;
  encode(h, rep, c->out);
  ids_.release_listener(*id);
  enter(id, c, *row);
  send_retried(*c, mad_timeout(c->peer_timeout), c->peer_retries);
  return {};
}

Status Cm::reject(Id* id, std::span<const uint8_t> pd) {
  OpLock g(*this);
  Conn* c = id->conn_;
  if (!c) return err::inval(std::string("rdma_reject: nothing to reject (the id is ") + to_string(id->state_) + ")");
  MadHeader h;
  h.tid = c->tid;
  const fsm::Row* row = row_for(id, c, fsm::Ev::reject);
  switch (row ? row->act : fsm::Act::none) {
    case fsm::Act::reject_sidr: {
      if (pd.size() > kSidrRepPrivate) return err::inval("rdma_reject: too much private data");
      SidrRep rep;
      rep.request_id = c->remote_id;
      rep.status = uint8_t(SidrStatus::rejected);
      rep.service_id = c->service_id;
      copy_private(rep.private_data, 0, pd);
      encode(h, rep, c->out);
      break;
    }
    case fsm::Act::reject_req:
    case fsm::Act::reject_rep: {
      if (pd.size() > kRejPrivate)
        return err::inval("rdma_reject: " + std::to_string(pd.size()) + " bytes of private data (at most " +
                          std::to_string(kRejPrivate) + ")");
      Rej r;
      r.local_comm_id = c->local_id;
      r.remote_comm_id = c->remote_id;
      r.msg_rejected = row->act == fsm::Act::reject_req ? MsgRef::req : MsgRef::rep;
      r.reason = uint16_t(RejReason::consumer_reject);
      copy_private(r.private_data, 0, pd);
      encode(h, r, c->out);
      break;
    }
    default: return err::inval(std::string("rdma_reject: nothing to reject (the id is ") + to_string(c->state) + ")");
  }
  c->has_out = true;
  send(*c, c->out);
  enter(id, c, *row);  // closed, kept to answer a repeated REQ with the same REJ
  return {};
}

Status Cm::establish(Id* id) {
  OpLock g(*this);
  Conn* c = id->conn_;
  const fsm::Row* row = c ? row_for(id, c, fsm::Ev::establish) : nullptr;
  if (!row)
    return err::inval(std::string("rdma_establish: no connection response to complete (the id is ") +
                      to_string(id->state_) + ")");
  send_rtu(*c);
  enter(id, c, *row);
  return {};
}

}  // namespace uroce::cm
