// Cm: received MADs (IBA 12.9.5-12.9.8 for the connection, 12.11 for SIDR).
// Each handler finds the record by our comm ID (or, for a REQ/SIDR_REQ, by
// the peer's address and comm ID), acts for its state, and answers
// duplicates as cm.hpp describes.
#include <algorithm>
#include <cerrno>

#include "cm/cm.hpp"
#include "cm/conn.hpp"
#include "cm/fsm.hpp"
#include "common/log.hpp"

namespace uroce::cm {

void Cm::on_mad(GsiPort& port, const GsiMad& mad) noexcept {
  OpLock g(*this);
  MadHeader h;
  if (!decode_header(mad.data, h) || mad.data.size() < kMadSize) return;
  if (h.base_version == kMadBaseVersion && h.mgmt_class == kMgmtClassCm && h.class_version == kCmClassVersion &&
      AttrId(h.attr_id) == AttrId::class_port_info) {
    if (h.method == kMethodGet) return live_.on_probe(port, mad, h);
    if (h.method == kMethodGetResp) return live_.on_probe_answer(h);
  }
  if (!is_cm_send(h)) {
    UROCE_LOG(debug, "cm: ignoring %s from %s", describe(mad.data).c_str(), mad.src.to_string().c_str());
    return;
  }
  UROCE_LOG(debug, "cm: recv %s from %s", describe(mad.data).c_str(), mad.src.to_string().c_str());
  switch (AttrId(h.attr_id)) {
    case AttrId::req: recv_req(port, mad, h); break;
    case AttrId::rep: recv_rep(port, mad, h); break;
    case AttrId::rtu: recv_rtu(mad); break;
    case AttrId::rej: recv_rej(mad); break;
    case AttrId::mra: recv_mra(mad); break;
    case AttrId::dreq: recv_dreq(port, mad, h); break;
    case AttrId::drep: recv_drep(mad); break;
    case AttrId::sidr_req: recv_sidr_req(port, mad, h); break;
    case AttrId::sidr_rep: recv_sidr_rep(mad); break;
    default: break;  // LAP/APR (path migration) and ClassPortInfo are not spoken
  }
}

// ------------------------------------------------------------------ passive: REQ, RTU

void Cm::hold_orphan(GsiPort& port, const GsiMad& mad, uint32_t peer_comm_id) noexcept {
  if (ids_.hold_orphan(port, mad, peer_comm_id, now() + cfg_.no_listener_grace)) woke_ = true;
}

void Cm::retry_orphans(uint64_t sid, bool last_chance) noexcept {
  for (const Orphan& o : ids_.take_orphans(sid, now())) {
    GsiMad m;
    m.data = o.mad;
    m.src = o.src;
    m.dst = o.dst;
    m.src_qp = kGsiQpn;
    MadHeader h;
    decode_header(o.mad, h);
    if (AttrId(h.attr_id) == AttrId::req)
      recv_req(*o.port, m, h, last_chance);
    else
      recv_sidr_req(*o.port, m, h, last_chance);
  }
}

void Cm::recv_req(GsiPort& port, const GsiMad& mad, const MadHeader& h, bool last_chance) noexcept {
  Req r;
  if (!decode(mad.data, r)) return;
  if (auto it = by_remote_.find({mad.src.addr, r.local_comm_id}); it != by_remote_.end()) {
    Conn& c = *it->second;
    const fsm::Row* row = row_for(c.id, &c, fsm::Ev::req);
    if (!row) return;
    switch (row->act) {
      case fsm::Act::send_mra_req: send_mra(c, MsgRef::req); break;  // still being considered
      case fsm::Act::resend_out:                                     // our REP (or REJ) was lost
        if (c.has_out) send(c, c.out);
        break;
      default: break;
    }
    enter(c.id, &c, *row);
    return;
  }
  const Endpoint reply = ids_.reply_endpoint(mad.src, r.local_comm_id);
  auto refuse = [&](RejReason why) { send_rej(port, reply, h.tid, 0, r.local_comm_id, MsgRef::req, why); };
  const bool xrc = r.transport_service_type == 3 && r.extended_transport_type == 1;
  if (r.transport_service_type > 1 && !xrc) return refuse(RejReason::invalid_transport_type);
  const bool ip = is_ip_service(r.service_id);
  IpCmHeader iph;
  IpAddr dst = mad.dst;
  if (ip) {
    if (!decode_ip_header(r.private_data, iph) || iph.major != 0) return refuse(RejReason::consumer_reject);
    dst = iph.dst;
  }
  Id* l = ids_.find_listener(r.service_id, dst, false);
  if (!l && !last_chance && cfg_.no_listener_grace.count() > 0) return hold_orphan(port, mad, r.local_comm_id);
  if (!l) {
    UROCE_LOG(info, "cm: REQ from %s for service 0x%llx on %s: nobody listens", mad.src.to_string().c_str(),
              static_cast<unsigned long long>(r.service_id), dst.to_string().c_str());
    return refuse(RejReason::invalid_service_id);
  }
  if (l->pending_ >= l->backlog_) return refuse(RejReason::consumer_reject);

  auto* child = new Id;
  child->ps_ = l->ps_;
  // The passive side of an XRC connection is the XRC_RECV half.
  child->qp_type_ = r.transport_service_type == 1 ? QpType::uc : xrc ? QpType::xrc_recv : QpType::rc;
  child->port_ = &port;
  child->src_ = {ip ? dst : port.address(), l->src_.port};
  child->dst_ = ip ? Endpoint{iph.src, iph.src_port} : Endpoint{mad.src.addr, 0};
  child->route_ = true;
  child->mtu_ = std::min<uint8_t>(r.path_mtu ? r.path_mtu : 3, mtu_enum(port.mtu()));
  child->tos_ = r.primary.traffic_class;
  child->afonly_ = l->afonly_;
  child->listener_ = l;
  ++l->pending_;
  ids_.insert(child);

  Conn& c = *new_conn(child, &port, false);
  c.remote_id = r.local_comm_id;
  c.tid = h.tid;
  c.peer = reply;
  c.remote_gid = r.primary.local_gid.is_unspecified() ? mad.src.addr : r.primary.local_gid;
  child->dgid_ = c.remote_gid;
  c.service_id = r.service_id;
  c.remote_qpn = r.local_qpn;
  c.remote_psn = r.starting_psn;
  c.path_mtu = child->mtu_;
  c.max_dest_rd_atomic = r.initiator_depth;  // until accept says otherwise
  c.max_rd_atomic = r.responder_resources;
  c.retry_count = r.retry_count;
  c.rnr_retry = r.rnr_retry_count;
  if (r.primary.local_ack_timeout) c.ack_timeout = r.primary.local_ack_timeout;
  if (r.primary.hop_limit) c.hop_limit = r.primary.hop_limit;
  c.traffic_class = r.primary.traffic_class;
  c.flow_label = r.primary.flow_label;
  c.peer_timeout = r.local_cm_response_timeout;
  c.peer_retries = r.max_cm_retries;
  c.req_responder_resources = r.responder_resources;
  c.req_initiator_depth = r.initiator_depth;
  c.req_rnr_retry = r.rnr_retry_count;
  c.req_srq = r.srq;
  c.req_flow_control = r.e2e_flow_control;
  c.in_remote_index = true;
  by_remote_[{mad.src.addr, r.local_comm_id}] = &c;
  if (const fsm::Row* row = row_for(child, &c, fsm::Ev::req)) enter(child, &c, *row);  // offer_req
  live_.note_peer(c, mad.src, r.local_comm_id);

  Event ev;
  ev.type = EventType::connect_request;
  ev.id = child;
  ev.listen_id = l;
  const size_t hdr = ip ? kIpCmHeaderSize : 0;
  ev.private_data.assign(r.private_data.begin() + std::ptrdiff_t(hdr), r.private_data.end());
  ev.responder_resources = r.initiator_depth;
  ev.initiator_depth = r.responder_resources;
  ev.flow_control = r.e2e_flow_control;
  ev.retry_count = r.retry_count;
  ev.rnr_retry_count = r.rnr_retry_count;
  ev.srq = r.srq;
  ev.qp_num = r.local_qpn;
  emit(std::move(ev));
}

void Cm::recv_rtu(const GsiMad& mad) noexcept {
  Rtu r;
  if (!decode(mad.data, r)) return;
  Conn* c = conn_from_peer(r.remote_comm_id, mad);
  if (!c || c->active || c->remote_id != r.local_comm_id) return;
  const fsm::Row* row = row_for(c->id, c, fsm::Ev::rtu);
  if (!row) return;  // a duplicate
  // take_rtu
  c->has_out = false;
  c->deadline = Clock::time_point::max();
  enter(c->id, c, *row);
  conn_event(*c, EventType::established, 0, r.private_data);
}

// ------------------------------------------------------------------ active: REP

void Cm::recv_rep(GsiPort& port, const GsiMad& mad, const MadHeader& h) noexcept {
  (void)port;
  (void)h;
  Rep r;
  if (!decode(mad.data, r)) return;
  Conn* c = conn_from_peer(r.remote_comm_id, mad);
  if (!c || !c->active || c->ud) return;
  if (c->remote_id != 0 && c->remote_id != r.local_comm_id) return;  // not our peer's
  const fsm::Row* row = row_for(c->id, c, fsm::Ev::rep);
  if (!row) return;
  switch (row->act) {
    case fsm::Act::take_rep:
    case fsm::Act::take_rep_no_qp: break;
    case fsm::Act::resend_rtu:  // our RTU was lost
      send_rtu(*c);
      return;
    case fsm::Act::send_mra_rep:  // the application has not established yet
      send_mra(*c, MsgRef::rep);
      return;
    default: return;
  }
  c->remote_id = r.local_comm_id;
  c->remote_qpn = r.local_qpn;
  c->remote_psn = r.starting_psn;
  c->max_rd_atomic = std::min(c->max_rd_atomic, r.responder_resources);
  c->max_dest_rd_atomic = std::max(c->max_dest_rd_atomic, r.initiator_depth);
  c->rnr_retry = r.rnr_retry_count;
  c->has_out = false;
  c->deadline = Clock::time_point::max();
  live_.note_peer(*c, mad.src, r.local_comm_id);
  Id& id = *c->id;
  auto report = [&](EventType t) {
    Event ev;
    ev.type = t;
    ev.id = &id;
    ev.private_data.assign(r.private_data.begin(), r.private_data.end());
    ev.responder_resources = r.responder_resources;
    ev.initiator_depth = r.initiator_depth;
    ev.flow_control = r.e2e_flow_control;
    ev.rnr_retry_count = r.rnr_retry_count;
    ev.srq = r.srq;
    ev.qp_num = r.local_qpn;
    emit(std::move(ev));
  };
  if (row->act == fsm::Act::take_rep_no_qp) {
    enter(&id, c, *row);
    report(EventType::connect_response);
    return;
  }
  if (Status s = qp_to_rts(id, *c); !s.ok()) {
    UROCE_LOG(warn, "cm: connecting QP 0x%06x: %s", id.qp_->qpn(), s.to_string().c_str());
    send_rej(*c->port, c->peer, c->tid, c->local_id, c->remote_id, MsgRef::rep, RejReason::no_resources);
    conn_event(*c, EventType::connect_error, -s.code(), {});
    enter(&id, c, *row, /*failed=*/true);
    return;
  }
  send_rtu(*c);
  enter(&id, c, *row);
  report(EventType::established);
}

// ------------------------------------------------------------------ REJ, MRA

void Cm::recv_rej(const GsiMad& mad) noexcept {
  Rej r;
  if (!decode(mad.data, r)) return;
  Conn* c = conn_from_peer(r.remote_comm_id, mad);
  if (!c && r.remote_comm_id == 0 && r.msg_rejected == MsgRef::req) {
    // The active side gave up on a REQ before it knew our comm ID.
    auto it = by_remote_.find({mad.src.addr, r.local_comm_id});
    if (it != by_remote_.end()) c = it->second;
  }
  if (!c || c->ud) return;
  if (c->remote_id != 0 && r.local_comm_id != 0 && c->remote_id != r.local_comm_id) return;
  // In req_rcvd: the active side gave up while we considered.
  const fsm::Row* row = row_for(c->id, c, fsm::Ev::rej);
  if (!row) return;
  UROCE_LOG(info, "cm: rejected by %s, reason %u", mad.src.to_string().c_str(), unsigned(r.reason));
  conn_event(*c, EventType::rejected, r.reason, r.private_data);  // take_rej
  enter(c->id, c, *row);
}

void Cm::recv_mra(const GsiMad& mad) noexcept {
  Mra m;
  if (!decode(mad.data, m)) return;
  Conn* c = conn_from_peer(m.remote_comm_id, mad);
  if (!c) return;
  if (m.msg_mraed != MsgRef::req && m.msg_mraed != MsgRef::rep) return;
  const fsm::Row* row = row_for(c->id, c, m.msg_mraed == MsgRef::req ? fsm::Ev::mra_req : fsm::Ev::mra_rep);
  if (!row) return;
  if (row->act == fsm::Act::take_mra_req) c->remote_id = m.local_comm_id;
  // The peer asks for patience: the next retry waits its service timeout.
  enter(c->id, c, *row);
  c->deadline = now() + mad_timeout(m.service_timeout);
}

// ------------------------------------------------------------------ DREQ, DREP

void Cm::recv_dreq(GsiPort& port, const GsiMad& mad, const MadHeader& h) noexcept {
  Dreq d;
  if (!decode(mad.data, d)) return;
  if (conn_by_local(d.remote_comm_id) && !conn_from_peer(d.remote_comm_id, mad)) return;  // forged: no answer
  Conn* c = conn_by_local(d.remote_comm_id);
  if (!c || c->ud || c->remote_id != d.local_comm_id) {
    // Not a connection of ours (any more): DREP, so that the peer stops.
    Drep r;
    r.local_comm_id = d.remote_comm_id;
    r.remote_comm_id = d.local_comm_id;
    MadHeader rh;
    rh.tid = h.tid;
    MadBuf out;
    encode(rh, r, out);
    port.send(ids_.reply_endpoint(mad.src, d.local_comm_id), out);
    return;
  }
  const fsm::Row* row = row_for(c->id, c, fsm::Ev::dreq);
  if (!row) return;
  switch (row->act) {
    case fsm::Act::take_dreq:  // in rep_sent: the RTU was lost, the peer is past it
      c->has_out = false;
      c->deadline = Clock::time_point::max();
      enter(c->id, c, *row);
      c->disconnect_reported = true;
      conn_event(*c, EventType::disconnected, 0, d.private_data);
      break;
    case fsm::Act::answer_dreq:  // both sides disconnect at once
      send_drep(*c);
      enter(c->id, c, *row);
      break;
    case fsm::Act::send_drep: send_drep(*c); break;  // our DREP was lost
    default: break;
  }
}

void Cm::recv_drep(const GsiMad& mad) noexcept {
  Drep d;
  if (!decode(mad.data, d)) return;
  Conn* c = conn_from_peer(d.remote_comm_id, mad);
  if (!c || c->remote_id != d.local_comm_id) return;
  if (const fsm::Row* row = row_for(c->id, c, fsm::Ev::drep)) enter(c->id, c, *row);
}

// ------------------------------------------------------------------ SIDR

void Cm::recv_sidr_req(GsiPort& port, const GsiMad& mad, const MadHeader& h, bool last_chance) noexcept {
  SidrReq r;
  if (!decode(mad.data, r)) return;
  if (auto it = by_remote_.find({mad.src.addr, r.request_id}); it != by_remote_.end()) {
    Conn& c = *it->second;
    const fsm::Row* row = row_for(c.id, &c, fsm::Ev::sidr_req);
    if (row && c.has_out) send(c, c.out);  // resend_out: our SIDR_REP was lost
    return;
  }
  const Endpoint reply = ids_.reply_endpoint(mad.src, r.request_id);
  auto refuse = [&](SidrStatus st) {
    SidrRep rep;
    rep.request_id = r.request_id;
    rep.status = uint8_t(st);
    rep.service_id = r.service_id;
    MadHeader rh;
    rh.tid = h.tid;
    MadBuf out;
    encode(rh, rep, out);
    port.send(reply, out);
  };
  const bool ip = is_ip_service(r.service_id);
  IpCmHeader iph;
  IpAddr dst = mad.dst;
  if (ip) {
    if (!decode_ip_header(r.private_data, iph) || iph.major != 0) return refuse(SidrStatus::rejected);
    dst = iph.dst;
  }
  Id* l = ids_.find_listener(r.service_id, dst, true);
  if (!l && !last_chance && cfg_.no_listener_grace.count() > 0) return hold_orphan(port, mad, r.request_id);
  if (!l) return refuse(SidrStatus::sid_not_supported);
  if (l->pending_ >= l->backlog_) return refuse(SidrStatus::rejected);

  auto* child = new Id;
  child->ps_ = l->ps_;
  child->qp_type_ = QpType::ud;
  child->port_ = &port;
  child->src_ = {ip ? dst : port.address(), l->src_.port};
  child->dst_ = ip ? Endpoint{iph.src, iph.src_port} : Endpoint{mad.src.addr, 0};
  child->route_ = true;
  child->mtu_ = mtu_enum(port.mtu());
  child->listener_ = l;
  ++l->pending_;
  ids_.insert(child);

  Conn& c = *new_conn(child, &port, false);
  c.ud = true;
  c.remote_id = r.request_id;
  c.tid = h.tid;
  c.peer = reply;
  c.remote_gid = mad.src.addr;
  child->dgid_ = c.remote_gid;
  c.service_id = r.service_id;
  c.in_remote_index = true;
  by_remote_[{mad.src.addr, r.request_id}] = &c;
  if (const fsm::Row* row = row_for(child, &c, fsm::Ev::sidr_req)) enter(child, &c, *row);  // offer_sidr_req

  Event ev;
  ev.type = EventType::connect_request;
  ev.id = child;
  ev.listen_id = l;
  ev.ud = true;
  const size_t hdr = ip ? kIpCmHeaderSize : 0;
  ev.private_data.assign(r.private_data.begin() + std::ptrdiff_t(hdr), r.private_data.end());
  ev.ud_dgid = mad.src.addr;
  ev.ud_sgid = port.address();
  ev.ud_hop_limit = cfg_.hop_limit;
  emit(std::move(ev));
}

void Cm::recv_sidr_rep(const GsiMad& mad) noexcept {
  SidrRep r;
  if (!decode(mad.data, r)) return;
  Conn* c = conn_from_peer(r.request_id, mad);
  if (!c || !c->ud || !c->active) return;
  const bool ok = r.status == uint8_t(SidrStatus::ok);
  const fsm::Row* row = row_for(c->id, c, ok ? fsm::Ev::sidr_rep_ok : fsm::Ev::sidr_rep_err);
  if (!row) return;
  Id* id = c->id;
  Event ev;
  ev.id = id;
  ev.ud = true;
  ev.private_data.assign(r.private_data.begin(), r.private_data.end());
  if (r.status == uint8_t(SidrStatus::ok)) {
    ev.type = EventType::established;
    ev.ud_dgid = c->remote_gid;
    ev.ud_sgid = c->local_gid;
    ev.ud_hop_limit = c->hop_limit;
    ev.ud_traffic_class = id ? id->tos_ : 0;
    ev.qp_num = r.qpn;
    ev.qkey = r.qkey;
  } else {
    UROCE_LOG(info, "cm: SIDR_REP from %s with status %u", mad.src.to_string().c_str(), unsigned(r.status));
    ev.type = EventType::unreachable;
    ev.status = r.status;
  }
  enter(id, c, *row);  // closed; the id established when ok (kIdUp)
  if (id) emit(std::move(ev));
}

}  // namespace uroce::cm
