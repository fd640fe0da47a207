// Cm: connection records, sending MADs with retries, events, the QP
// attributes and transitions a connection implies, disconnect, and the
// retransmission / timewait timers (IBA 12.9).  Connecting, accepting and
// rejecting: cm_connect.cpp.
#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <tuple>

#include "cm/cm.hpp"
#include "cm/conn.hpp"
#include "cm/fsm.hpp"
#include "common/log.hpp"

namespace uroce::cm {

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

uint64_t Cm::foreign_mads() {
  Lock g(mu_);
  return foreign_mads_;
}

Conn* Cm::conn_from_peer(uint32_t local_comm_id, const GsiMad& mad) noexcept {
  Conn* c = conn_by_local(local_comm_id);
  if (!c) return nullptr;
  const IpAddr& a = mad.src.addr;
  if (a == c->remote_gid || a == c->peer.addr || a == c->peer_src.addr) return c;
  ++foreign_mads_;
  UROCE_LOG(info, "cm: ignoring %s for connection 0x%08x from %s, not its peer %s", describe(mad.data).c_str(),
            local_comm_id, mad.src.to_string().c_str(), c->remote_gid.to_string().c_str());
  return nullptr;
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

const fsm::Row* Cm::row_for(const Id* id, const Conn* c, fsm::Ev ev) const noexcept {
  const State key = c ? c->state : id->state_;
  fsm::Facts f;
  f.qp = id && id->qp_;
  f.retries_left = c && c->has_out && c->retries_left > 0;
  f.ud = id ? id->qp_type_ == QpType::ud : c && c->ud;
  const fsm::Row* r = fsm::find(key, ev, f);
  if (log::enabled(log::Level::trace)) {
    const uint32_t comm = c ? c->local_id : 0;
    if (r)
      UROCE_LOG(trace, "cm: 0x%08x %s --%s/%s--> %s", comm, to_string(key), fsm::to_string(ev), fsm::to_string(r->act),
                to_string(r->next));
    else
      UROCE_LOG(trace, "cm: 0x%08x %s --%s--> (no row)", comm, to_string(key), fsm::to_string(ev));
  }
  return r;
}

void Cm::enter(Id* id, Conn* c, const fsm::Row& r, bool failed) noexcept {
  const State to = failed ? r.fail : r.next;
  if (!c) {
    if (id) id->state_ = to;
    return;
  }
  if (to == c->state) return;
  switch (to) {
    case State::closed: {
      Id* const was = c->id;
      close_conn(*c, (r.flags & fsm::kKeep) != 0);
      if ((r.flags & fsm::kIdUp) && was) was->state_ = State::established;
      break;
    }
    case State::timewait: enter_timewait(*c); break;
    default: set_state(*c, to); break;
  }
}

// The id leaves the connection (its state becomes closed); the record stays
// for a timewait to answer duplicates (keep_for_dups) or goes now.
void Cm::close_conn(Conn& c, bool keep_for_dups) noexcept {
  if (Id* id = c.id) {
    ids_.release_listener(*id);
    id->conn_ = nullptr;
    id->state_ = State::closed;
    c.id = nullptr;
  }
  c.state = State::closed;
  c.retries_left = 0;
  if (keep_for_dups)
    c.deadline = now() + cfg_.timewait;
  else
    drop_conn(&c);
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
      if (ud)
        a.qkey = qkey_for(id.ps_);
      else
        a.qp_access_flags = kRemoteAccess;
      break;
    case QpState::rtr:
      if (ud || !c) break;
      a.mask |= qp_mask::kAv | qp_mask::kPathMtu | qp_mask::kDestQpn | qp_mask::kRqPsn;
      // A reliable responder (RC, XRC_RECV) also takes its READ/atomic
      // depth and RNR timer; UC and XRC_SEND have no such responder.
      if (id.qp_type_ == QpType::rc || id.qp_type_ == QpType::xrc_recv)
        a.mask |= qp_mask::kMaxDestRdAtomic | qp_mask::kMinRnrTimer;
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
      // A reliable requester (RC, XRC_SEND) takes its retry attributes;
      // XRC_RECV the timeout alone, UC none (as the kernel's CM gives them).
      if (id.qp_type_ == QpType::rc || id.qp_type_ == QpType::xrc_send)
        a.mask |= qp_mask::kTimeout | qp_mask::kRetryCnt | qp_mask::kRnrRetry | qp_mask::kMaxQpRdAtomic;
      else if (id.qp_type_ == QpType::xrc_recv)
        a.mask |= qp_mask::kTimeout;
      a.sq_psn = c->remote_psn;  // what the peer's REQ/REP announced
      a.timeout = c->ack_timeout;
      a.retry_cnt = c->retry_count;
      a.rnr_retry = c->rnr_retry;
      a.max_rd_atomic = c->max_rd_atomic;
      break;
    default: break;
  }
}

Status Cm::init_qp_attr(Id* id, QpAttrs& a) {
  OpLock g(*this);
  const bool ud = id->qp_type_ == QpType::ud;
  switch (a.qp_state) {
    case QpState::init: break;
    case QpState::rtr:
    case QpState::rts:
      if (ud) break;
      // The peer's QPN and PSN must be known: a REQ received, or a REP.
      if (!id->conn_ || id->conn_->remote_qpn == 0 ||
          (id->conn_->active && (id->state_ == State::req_sent || id->state_ == State::mra_req_rcvd)))
        return err::inval(std::string("rdma_init_qp_attr: no connection parameters yet (the id is ") +
                          to_string(id->state_) + ")");
      break;
    default: return err::inval("rdma_init_qp_attr: only INIT, RTR and RTS have attributes");
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

// ------------------------------------------------------------------ disconnect

Status Cm::disconnect(Id* id, bool* event_follows) {
  OpLock g(*this);
  if (event_follows) *event_follows = false;
  if (id->qp_type_ == QpType::ud) return err::inval("rdma_disconnect: a UD id has no connection");
  Conn* c = id->conn_;
  const fsm::Row* row = row_for(id, c, fsm::Ev::disconnect);
  if (!row)
    return err::inval(std::string("rdma_disconnect: not connected (the id is ") + to_string(c ? c->state : id->state_) +
                      ")");
  switch (row->act) {
    case fsm::Act::send_dreq: {
      qp_to_err(*id);
      Dreq d;
      d.local_comm_id = c->local_id;
      d.remote_comm_id = c->remote_id;
      d.remote_qpn = c->remote_qpn;
      MadHeader h;
      h.tid = c->tid;
      encode(h, d, c->out);
      enter(id, c, *row);
      send_retried(*c, mad_timeout(c->peer_timeout), c->peer_retries);
      if (event_follows) *event_follows = true;
      return {};
    }
    case fsm::Act::reply_drep:
      // DISCONNECTED was reported when the DREQ came; now the DREP.
      qp_to_err(*id);
      send_drep(*c);
      enter(id, c, *row);
      if (event_follows) *event_follows = true;
      return {};
    default:  // quiesce_qp: already disconnecting or disconnected
      qp_to_err(*id);
      enter(id, c, *row);
      return {};
  }
}

// ------------------------------------------------------------------ a peer gone

// The peer process of `c` died without a word (Liveness): as if its DREQ
// (or, in the handshake, its REJ) had come.
void Cm::peer_gone(Conn& c) noexcept {
  UROCE_LOG(info, "cm: the process of peer %s (registry slot %u) is gone: connection 0x%08x (%s) ends",
            c.peer.to_string().c_str(), c.peer_slot, c.local_id, to_string(c.state));
  const fsm::Row* row = row_for(c.id, &c, fsm::Ev::peer_gone);
  if (!row) return;
  c.has_out = false;
  c.retries_left = 0;
  c.deadline = Clock::time_point::max();
  switch (row->act) {
    case fsm::Act::gone_disconnect:  // as if its DREQ had come
      enter(c.id, &c, *row);
      if (!c.disconnect_reported) {
        c.disconnect_reported = true;
        conn_event(c, EventType::disconnected, 0, {});
      }
      break;
    case fsm::Act::gone_reject:  // the handshake was under way: as if its REJ had come
      conn_event(c, EventType::rejected, int(RejReason::consumer_reject), {});
      enter(c.id, &c, *row);
      break;
    default:  // dreq_sent: as if its DREP had come
      enter(c.id, &c, *row);
      break;
  }
}

// ------------------------------------------------------------------ timers

void Cm::on_conn_timer(Conn& c) noexcept {
  const bool seeking = c.seek_until != Clock::time_point{};  // a request waiting for its listener
  const fsm::Row* row = row_for(c.id, &c, seeking ? fsm::Ev::seek_tick : fsm::Ev::timeout);
  if (!row) {  // a closed record kept for duplicates, or nothing to wait for
    drop_conn(&c);
    return;
  }
  switch (row->act) {
    case fsm::Act::seek:
      c.peer = ids_.request_endpoint(c.remote_gid, c.remote_gid, c.service_id);
      if (c.peer.port != kRoceV2Port || now() >= c.seek_until) {
        send_or_seek(c);
      } else {
        c.deadline = now() + kSeekInterval;
      }
      return;
    case fsm::Act::retry:
      --c.retries_left;
      c.deadline = now() + c.timeout;
      UROCE_LOG(info, "cm: no answer from %s: sending %s again (%d retries left)", c.peer.to_string().c_str(),
                describe(c.out).c_str(), c.retries_left);
      send(c, c.out);
      return;
    case fsm::Act::exit_timewait: {
      Id* const id = c.id;
      enter(id, &c, *row);  // the record goes; the id is closed
      if (id) emit_simple(id, EventType::timewait_exit);
      return;
    }
    default: break;
  }
  // Retries are used up.
  UROCE_LOG(info, "cm: %s: no answer from %s after all retries", to_string(c.state), c.peer.to_string().c_str());
  switch (row->act) {
    case fsm::Act::give_up_req:
    case fsm::Act::give_up_rep:
      send_rej(*c.port, c.peer, c.tid, c.local_id, c.remote_id,
               row->act == fsm::Act::give_up_req ? MsgRef::req : MsgRef::rep, RejReason::timeout);
      conn_event(c, EventType::unreachable, -ETIMEDOUT, {});
      break;
    case fsm::Act::give_up_sidr: conn_event(c, EventType::unreachable, -ETIMEDOUT, {}); break;
    default: break;  // DREQ unanswered: timewait (which reports DISCONNECTED)
  }
  enter(c.id, &c, *row);
}

}  // namespace uroce::cm
