// Cm: connection records and the operations on them -- connect, accept,
// reject, establish, disconnect, the QP transitions they imply, and the
// retransmission / timewait timers (IBA 12.9).
#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <tuple>

#include "cm/cm.hpp"
#include "cm/conn.hpp"
#include "common/log.hpp"

namespace uroce::cm {
namespace {

constexpr uint16_t kRoceV2Port = 4791;
constexpr auto kSeekInterval = std::chrono::milliseconds(5);

uint32_t qkey_for(uint16_t ps) noexcept {
  (void)ps;  // RDMA_PS_UDP, RDMA_PS_IB and RDMA_PS_IPOIB (no multicast here) all use it
  return kRdmaUdpQkey;
}

template <size_t N>
void copy_private(std::array<uint8_t, N>& to, size_t offset, std::span<const uint8_t> from) {
  std::copy(from.begin(), from.end(), to.begin() + std::ptrdiff_t(offset));
}

}  // namespace

// ------------------------------------------------------------------ records

uint32_t Cm::new_comm_id() {
  const uint32_t slot = dir_.slot() & 0x3ff;
  while (true) {
    const uint32_t v = slot ? (slot << 22 | (++comm_counter_ & 0x3fffff)) : uint32_t(rng_());
    if (v != 0 && !conns_.count(v)) return v;
  }
}

Conn* Cm::new_conn(Id* id, GsiPort* port, bool active) {
  auto c = std::make_unique<Conn>();
  c->local_id = new_comm_id();
  c->id = id;
  c->port = port;
  c->active = active;
  c->local_gid = port->address();
  c->local_psn = uint32_t(rng_()) & 0xffffff;
  c->hop_limit = cfg_.hop_limit;
  c->ack_timeout = cfg_.ack_timeout;
  c->peer_timeout = cfg_.cm_response_timeout;
  c->peer_retries = cfg_.max_cm_retries;
  Conn* raw = c.get();
  conns_.emplace(raw->local_id, std::move(c));
  if (id) id->conn_ = raw;
  return raw;
}

Conn* Cm::conn_by_local(uint32_t local_comm_id) const noexcept {
  auto it = conns_.find(local_comm_id);
  return it == conns_.end() ? nullptr : it->second.get();
}

void Cm::drop_conn(Conn* c) noexcept {
  if (c->id) c->id->conn_ = nullptr;
  if (c->in_remote_index) by_remote_.erase({c->peer.addr, c->remote_id});
  conns_.erase(c->local_id);
}

void Cm::set_state(Conn& c, State s) noexcept {
  c.state = s;
  if (c.id) c.id->state_ = s;
}

// The id leaves the connection (its state becomes closed); the record stays
// for a timewait to answer duplicates (keep_for_dups) or goes now.
void Cm::close_conn(Conn& c, bool keep_for_dups) noexcept {
  if (Id* id = c.id) {
    release_listener(*id);
    id->conn_ = nullptr;
    id->state_ = State::closed;
    c.id = nullptr;
  }
  c.state = State::closed;
  c.retries_left = 0;
  if (keep_for_dups) c.deadline = now() + cfg_.timewait;
  else drop_conn(&c);
}

void Cm::enter_timewait(Conn& c) noexcept {
  c.state = State::timewait;
  if (c.id) c.id->state_ = State::timewait;
  c.retries_left = 0;
  c.deadline = now() + cfg_.timewait;
  if (!c.disconnect_reported && c.id) {
    c.disconnect_reported = true;
    conn_event(c, EventType::disconnected, 0, {});
  }
}

// ------------------------------------------------------------------ sending

void Cm::send(Conn& c, const MadBuf& mad) noexcept {
  UROCE_LOG(debug, "cm: send %s to %s", describe(mad).c_str(), c.peer.to_string().c_str());
  c.port->send(c.peer, mad);
}

void Cm::send_retried(Conn& c, Clock::duration timeout, int retries) noexcept {
  c.has_out = true;
  c.timeout = timeout;
  c.retries_left = retries;
  c.deadline = now() + timeout;
  woke_ = true;
  send(c, c.out);
}

void Cm::send_rej(GsiPort& port, const Endpoint& to, uint64_t tid, uint32_t local, uint32_t remote, MsgRef msg,
                  RejReason reason, std::span<const uint8_t> pd) noexcept {
  Rej r;
  r.local_comm_id = local;
  r.remote_comm_id = remote;
  r.msg_rejected = msg;
  r.reason = uint16_t(reason);
  copy_private(r.private_data, 0, pd.first(std::min(pd.size(), kRejPrivate)));
  MadHeader h;
  h.tid = tid;
  MadBuf out;
  encode(h, r, out);
  UROCE_LOG(debug, "cm: send REJ reason %u to %s", unsigned(reason), to.to_string().c_str());
  port.send(to, out);
}

void Cm::send_rtu(Conn& c) noexcept {
  Rtu r;
  r.local_comm_id = c.local_id;
  r.remote_comm_id = c.remote_id;
  MadHeader h;
  h.tid = c.tid;
  MadBuf out;
  encode(h, r, out);
  send(c, out);
}

void Cm::send_drep(Conn& c) noexcept {
  Drep r;
  r.local_comm_id = c.local_id;
  r.remote_comm_id = c.remote_id;
  MadHeader h;
  h.tid = c.tid;
  MadBuf out;
  encode(h, r, out);
  send(c, out);
}

void Cm::send_mra(Conn& c, MsgRef msg) noexcept {
  Mra m;
  m.local_comm_id = c.local_id;
  m.remote_comm_id = c.remote_id;
  m.msg_mraed = msg;
  m.service_timeout = cfg_.mra_service_timeout;
  MadHeader h;
  h.tid = c.tid;
  MadBuf out;
  encode(h, m, out);
  send(c, out);
}

// ------------------------------------------------------------------ events

void Cm::conn_event(Conn& c, EventType t, int status, std::span<const uint8_t> pd) noexcept {
  if (!c.id) return;
  Event ev;
  ev.type = t;
  ev.id = c.id;
  ev.status = status;
  ev.private_data.assign(pd.begin(), pd.end());
  ev.responder_resources = c.max_dest_rd_atomic;
  ev.initiator_depth = c.max_rd_atomic;
  ev.retry_count = c.retry_count;
  ev.rnr_retry_count = c.rnr_retry;
  ev.qp_num = c.remote_qpn;
  emit(std::move(ev));
}

// ------------------------------------------------------------------ QP attributes

void Cm::fill_qp_attr(const Id& id, const Conn* c, QpAttrs& a) const noexcept {
  const bool ud = id.qp_type_ == QpType::ud;
  const QpState st = a.qp_state;
  a = QpAttrs{};
  a.qp_state = st;
  a.mask = qp_mask::kState;
  switch (st) {
    case QpState::init:
      a.mask |= qp_mask::kPkeyIndex | qp_mask::kPort | (ud ? qp_mask::kQkey : qp_mask::kAccessFlags);
      a.pkey_index = 0;
      a.port_num = 1;
      if (ud) a.qkey = qkey_for(id.ps_);
      else a.qp_access_flags = kRemoteAccess;
      break;
    case QpState::rtr:
      if (ud || !c) break;
      a.mask |= qp_mask::kAv | qp_mask::kPathMtu | qp_mask::kDestQpn | qp_mask::kRqPsn |
                qp_mask::kMaxDestRdAtomic | qp_mask::kMinRnrTimer;
      a.path_mtu = c->path_mtu;
      a.dest_qp_num = c->remote_qpn;
      a.rq_psn = c->local_psn;  // what our REQ/REP announced (see Conn::local_psn)
      a.max_dest_rd_atomic = c->max_dest_rd_atomic;
      a.min_rnr_timer = cfg_.min_rnr_timer;
      a.dgid = c->remote_gid;
      a.sgid_index = 0;
      a.flow_label = c->flow_label;
      a.hop_limit = c->hop_limit;
      a.traffic_class = c->traffic_class;
      a.port_num = 1;
      break;
    case QpState::rts:
      a.mask |= qp_mask::kSqPsn;
      if (ud || !c) break;
      a.mask |= qp_mask::kTimeout | qp_mask::kRetryCnt | qp_mask::kRnrRetry | qp_mask::kMaxQpRdAtomic;
      a.sq_psn = c->remote_psn;  // what the peer's REQ/REP announced
      a.timeout = c->ack_timeout;
      a.retry_cnt = c->retry_count;
      a.rnr_retry = c->rnr_retry;
      a.max_rd_atomic = c->max_rd_atomic;
      break;
    default:
      break;
  }
}

Status Cm::init_qp_attr(Id* id, QpAttrs& a) {
  OpLock g(*this);
  const bool ud = id->qp_type_ == QpType::ud;
  switch (a.qp_state) {
    case QpState::init:
      break;
    case QpState::rtr:
    case QpState::rts:
      if (ud) break;
      // The peer's QPN and PSN must be known: a REQ received, or a REP.
      if (!id->conn_ || id->conn_->remote_qpn == 0 ||
          (id->conn_->active && (id->state_ == State::req_sent || id->state_ == State::mra_req_rcvd)))
        return err::inval(std::string("rdma_init_qp_attr: no connection parameters yet (the id is ") +
                          to_string(id->state_) + ")");
      break;
    default:
      return err::inval("rdma_init_qp_attr: only INIT, RTR and RTS have attributes");
  }
  fill_qp_attr(*id, id->conn_, a);
  return {};
}

// INIT (again: the port and access may only be known now), RTR, RTS.
Status Cm::qp_to_rts(Id& id, Conn& c) noexcept {
  for (QpState st : {QpState::init, QpState::rtr, QpState::rts}) {
    QpAttrs a;
    a.qp_state = st;
    fill_qp_attr(id, &c, a);
    if (Status s = id.qp_->modify(a); !s.ok()) return s;
  }
  return {};
}

void Cm::qp_to_err(Id& id) noexcept {
  if (!id.qp_) return;
  QpAttrs a;
  a.qp_state = QpState::err;
  a.mask = qp_mask::kState;
  if (Status s = id.qp_->modify(a); !s.ok())
    UROCE_LOG(warn, "cm: moving QP 0x%06x to ERR: %s", id.qp_->qpn(), s.to_string().c_str());
}

// ------------------------------------------------------------------ connect

Status Cm::connect(Id* id, const ConnParam& p) {
  OpLock g(*this);
  if (id->state_ != State::route_resolved)
    return err::inval(std::string("rdma_connect: the route is not resolved (the id is ") + to_string(id->state_) +
                      ")");
  return id->qp_type_ == QpType::ud ? connect_ud(*id, p) : connect_rc(*id, p);
}

Status Cm::connect_rc(Id& id, const ConnParam& p) {
  const uint32_t qpn = id.qp_ ? id.qp_->qpn() : p.qp_num;
  if (qpn == 0) return err::inval("rdma_connect: the id has no QP and conn_param gives no qp_num");
  const uint64_t sid = service_id(id.ps_, id.dst_.port);
  const size_t hdr = is_ip_service(sid) ? kIpCmHeaderSize : 0;
  if (p.private_data.size() > kReqPrivate - hdr)
    return err::inval("rdma_connect: " + std::to_string(p.private_data.size()) + " bytes of private data (at most " +
                      std::to_string(kReqPrivate - hdr) + ")");
  Conn& c = *new_conn(&id, id.port_, true);
  c.remote_gid = id.dst_.addr;
  c.service_id = sid;
  c.peer = request_endpoint(id.dst_.addr, sid);
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
  r.transport_service_type = id.qp_type_ == QpType::uc ? 1 : 0;
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
  set_state(c, State::req_sent);
  send_or_seek(c);
  return {};
}

Status Cm::connect_ud(Id& id, const ConnParam& p) {
  const uint64_t sid = service_id(id.ps_, id.dst_.port);
  const size_t hdr = is_ip_service(sid) ? kIpCmHeaderSize : 0;
  if (p.private_data.size() > kSidrReqPrivate - hdr)
    return err::inval("rdma_connect: " + std::to_string(p.private_data.size()) + " bytes of private data (at most " +
                      std::to_string(kSidrReqPrivate - hdr) + ")");
  Conn& c = *new_conn(&id, id.port_, true);
  c.ud = true;
  c.remote_gid = id.dst_.addr;
  c.service_id = sid;
  c.peer = request_endpoint(id.dst_.addr, sid);
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
  set_state(c, State::sidr_req_sent);
  send_or_seek(c);
  return {};
}

// A request goes out at once, unless it is for an address of this host on
// which the directory shows no listener yet: then it waits (polling the
// directory) for the listener to appear, at most no_listener_grace.
void Cm::send_or_seek(Conn& c) noexcept {
  const bool local = port_for_address(c.remote_gid) != nullptr;
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
  if (c && c->state == State::sidr_req_rcvd) {
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
    close_conn(*c, true);  // kept to answer a repeated SIDR_REQ
    id->state_ = State::established;
    return {};
  }
  if (!c || c->state != State::req_rcvd)
    return err::inval(std::string("rdma_accept: no connection request to accept (the id is ") +
                      to_string(id->state_) + ")");
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
      close_conn(*c, false);
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
  release_listener(*id);
  set_state(*c, State::rep_sent);
  send_retried(*c, mad_timeout(c->peer_timeout), c->peer_retries);
  return {};
}

Status Cm::reject(Id* id, std::span<const uint8_t> pd) {
  OpLock g(*this);
  Conn* c = id->conn_;
  if (!c) return err::inval(std::string("rdma_reject: nothing to reject (the id is ") + to_string(id->state_) + ")");
  MadHeader h;
  h.tid = c->tid;
  switch (c->state) {
    case State::sidr_req_rcvd: {
      if (pd.size() > kSidrRepPrivate) return err::inval("rdma_reject: too much private data");
      SidrRep rep;
      rep.request_id = c->remote_id;
      rep.status = uint8_t(SidrStatus::rejected);
      rep.service_id = c->service_id;
      copy_private(rep.private_data, 0, pd);
      encode(h, rep, c->out);
      break;
    }
    case State::req_rcvd:
    case State::rep_rcvd: {
      if (pd.size() > kRejPrivate)
        return err::inval("rdma_reject: " + std::to_string(pd.size()) + " bytes of private data (at most " +
                          std::to_string(kRejPrivate) + ")");
      Rej r;
      r.local_comm_id = c->local_id;
      r.remote_comm_id = c->remote_id;
      r.msg_rejected = c->state == State::req_rcvd ? MsgRef::req : MsgRef::rep;
      r.reason = uint16_t(RejReason::consumer_reject);
      copy_private(r.private_data, 0, pd);
      encode(h, r, c->out);
      break;
    }
    default:
      return err::inval(std::string("rdma_reject: nothing to reject (the id is ") + to_string(c->state) + ")");
  }
  c->has_out = true;
  send(*c, c->out);
  close_conn(*c, true);  // kept to answer a repeated REQ with the same REJ
  return {};
}

Status Cm::establish(Id* id) {
  OpLock g(*this);
  Conn* c = id->conn_;
  if (!c || c->state != State::rep_rcvd)
    return err::inval(std::string("rdma_establish: no connection response to complete (the id is ") +
                      to_string(id->state_) + ")");
  send_rtu(*c);
  set_state(*c, State::established);
  return {};
}

// ------------------------------------------------------------------ disconnect

Status Cm::disconnect(Id* id, bool* event_follows) {
  OpLock g(*this);
  if (event_follows) *event_follows = false;
  if (id->qp_type_ == QpType::ud) return err::inval("rdma_disconnect: a UD id has no connection");
  Conn* c = id->conn_;
  const State st = c ? c->state : id->state_;
  switch (st) {
    case State::established:
    case State::rep_sent:
    case State::mra_rep_rcvd: {
      qp_to_err(*id);
      Dreq d;
      d.local_comm_id = c->local_id;
      d.remote_comm_id = c->remote_id;
      d.remote_qpn = c->remote_qpn;
      MadHeader h;
      h.tid = c->tid;
      encode(h, d, c->out);
      set_state(*c, State::dreq_sent);
      send_retried(*c, mad_timeout(c->peer_timeout), c->peer_retries);
      if (event_follows) *event_follows = true;
      return {};
    }
    case State::dreq_rcvd:
      // DISCONNECTED was reported when the DREQ came; now the DREP.
      qp_to_err(*id);
      send_drep(*c);
      enter_timewait(*c);
      if (event_follows) *event_follows = true;
      return {};
    case State::dreq_sent:
    case State::timewait:
    case State::closed:
      qp_to_err(*id);
      return {};
    default:
      return err::inval(std::string("rdma_disconnect: not connected (the id is ") + to_string(st) + ")");
  }
}

// ------------------------------------------------------------------ timers

void Cm::on_conn_timer(Conn& c) noexcept {
  if (c.seek_until != Clock::time_point{}) {  // a request waiting for its listener
    c.peer = request_endpoint(c.remote_gid, c.service_id);
    if (c.peer.port != kRoceV2Port || now() >= c.seek_until) {
      send_or_seek(c);
    } else {
      c.deadline = now() + kSeekInterval;
    }
    return;
  }
  switch (c.state) {
    case State::req_sent:
    case State::mra_req_rcvd:
    case State::rep_sent:
    case State::mra_rep_rcvd:
    case State::dreq_sent:
    case State::sidr_req_sent:
      if (c.has_out && c.retries_left > 0) {
        --c.retries_left;
        c.deadline = now() + c.timeout;
        UROCE_LOG(info, "cm: no answer from %s: sending %s again (%d retries left)", c.peer.to_string().c_str(),
                  describe(c.out).c_str(), c.retries_left);
        send(c, c.out);
        return;
      }
      break;
    case State::timewait:
      if (Id* id = c.id) {
        id->state_ = State::closed;
        id->conn_ = nullptr;
        c.id = nullptr;
        emit_simple(id, EventType::timewait_exit);
      }
      drop_conn(&c);
      return;
    default:  // a closed record kept for duplicates
      drop_conn(&c);
      return;
  }
  // Retries are used up.
  UROCE_LOG(info, "cm: %s: no answer from %s after all retries", to_string(c.state), c.peer.to_string().c_str());
  switch (c.state) {
    case State::req_sent:
    case State::mra_req_rcvd:
      send_rej(*c.port, c.peer, c.tid, c.local_id, c.remote_id, MsgRef::req, RejReason::timeout);
      conn_event(c, EventType::unreachable, -ETIMEDOUT, {});
      close_conn(c, false);
      break;
    case State::rep_sent:
    case State::mra_rep_rcvd:
      send_rej(*c.port, c.peer, c.tid, c.local_id, c.remote_id, MsgRef::rep, RejReason::timeout);
      conn_event(c, EventType::unreachable, -ETIMEDOUT, {});
      close_conn(c, false);
      break;
    case State::sidr_req_sent:
      conn_event(c, EventType::unreachable, -ETIMEDOUT, {});
      close_conn(c, false);
      break;
    case State::dreq_sent:
      enter_timewait(c);
      break;
    default:
      break;
  }
}

}  // namespace uroce::cm
