// Cm: ids, events, timers and options.  Addressing is in cm_addr.cpp, the
// connection operations in cm_conn.cpp, received MADs in cm_recv.cpp.
#include "cm/cm.hpp"

#include <cerrno>

#include "cm/conn.hpp"
#include "cm/fsm.hpp"
#include "common/log.hpp"

namespace uroce::cm {

const char* to_string(EventType t) noexcept {
  static constexpr const char* kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",  "RDMA_CM_EVENT_ADDR_ERROR",      "RDMA_CM_EVENT_ROUTE_RESOLVED",
      "RDMA_CM_EVENT_ROUTE_ERROR",    "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",  "RDMA_CM_EVENT_UNREACHABLE",     "RDMA_CM_EVENT_REJECTED",
      "RDMA_CM_EVENT_ESTABLISHED",    "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
      "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  const size_t i = size_t(t);
  return i < std::size(kNames) ? kNames[i] : "UNKNOWN EVENT";
}

const char* to_string(State s) noexcept {
  static constexpr const char* kNames[] = {
      "idle",         "addr_bound", "addr_resolved", "route_resolved", "listen",        "req_sent",
      "mra_req_rcvd", "rep_rcvd",   "req_rcvd",      "rep_sent",       "mra_rep_rcvd",  "established",
      "dreq_sent",    "dreq_rcvd",  "timewait",      "sidr_req_sent",  "sidr_req_rcvd", "closed"};
  const size_t i = size_t(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

Cm::Cm(Directory& dir, EventSink& sink, Config cfg, NowFn now)
    : dir_(dir), sink_(sink), cfg_(cfg), now_fn_(std::move(now)), rng_(std::random_device{}()) {
  comm_counter_ = uint32_t(rng_());
  tid_hi_ = uint32_t(rng_()) & 0xffff;
}

Cm::~Cm() = default;  // ids_ deletes the ids left

void Cm::set_waker(std::function<void()> w) {
  Lock g(mu_);
  waker_ = std::move(w);
}

void Cm::add_port(GsiPort& port) {
  Lock g(mu_);
  ids_.add_port(port);
}

size_t Cm::conn_count() {
  Lock g(mu_);
  return conns_.size();
}

// ------------------------------------------------------------------ ids

Id* Cm::create_id(void* user, uint16_t ps, QpType qp_type) {
  Lock g(mu_);
  auto* id = new Id;
  id->user = user;
  id->ps_ = ps;
  id->qp_type_ = qp_type;
  ids_.insert(id);
  return id;
}

void Cm::destroy_id(Id* id) noexcept {
  OpLock g(*this);
  if (!ids_.contains(id)) return;
  if (id->state_ == State::listen) ids_.unlisten(id);
  ids_.release_listener(*id);
  id->qp_ = nullptr;  // the caller has taken the QP away (or will)
  if (Conn* c = id->conn_) {
    MadHeader h;
    h.tid = c->tid;
    const fsm::Row* row = row_for(id, c, fsm::Ev::destroy);
    if (!row) {
      close_conn(*c, false);  // nothing to tell the peer
    } else {
      switch (row->act) {
        case fsm::Act::destroy_rej_req:
        case fsm::Act::destroy_rej_req_timeout:
        case fsm::Act::destroy_rej_rep: {
          const bool req = row->act != fsm::Act::destroy_rej_rep;
          send_rej(*c->port, c->peer, c->tid, c->local_id, c->remote_id, req ? MsgRef::req : MsgRef::rep,
                   row->act == fsm::Act::destroy_rej_req_timeout ? RejReason::timeout : RejReason::consumer_reject);
          break;
        }
        case fsm::Act::destroy_sidr_rej: {
          SidrRep rep;
          rep.request_id = c->remote_id;
          rep.status = uint8_t(SidrStatus::rejected);
          rep.service_id = c->service_id;
          encode(h, rep, c->out);
          send(*c, c->out);
          break;
        }
        case fsm::Act::destroy_dreq: {
          // The connection is torn down without its id: DREQ, then timewait.
          Dreq d;
          d.local_comm_id = c->local_id;
          d.remote_comm_id = c->remote_id;
          d.remote_qpn = c->remote_qpn;
          encode(h, d, c->out);
          c->id = nullptr;
          c->disconnect_reported = true;
          send_retried(*c, mad_timeout(c->peer_timeout), c->peer_retries);
          break;
        }
        case fsm::Act::destroy_drep:
          c->id = nullptr;
          send_drep(*c);
          break;
        default: c->id = nullptr; break;  // detach: the record finishes on its own
      }
      enter(c->id, c, *row);
    }
  }
  ids_.destroy(id);  // its children still waiting forget it
}

IdView Cm::view(const Id* id) {
  Lock g(mu_);
  IdView v;
  v.state = id->state_;
  v.port = id->port_;
  v.src = id->src_;
  v.dst = id->dst_;
  v.dgid = id->dgid_;
  v.route_resolved = id->route_;
  v.path_mtu = id->mtu_;
  v.tos = id->tos_;
  v.hop_limit = cfg_.hop_limit;
  if (const Conn* c = id->conn_) {
    v.hop_limit = c->hop_limit;
    v.flow_label = c->flow_label;
  }
  return v;
}

void Cm::with_lock(const std::function<void()>& f) {
  Lock g(mu_);
  f();
}

void Cm::set_qp(Id* id, QpControl* qp) noexcept {
  Lock g(mu_);
  id->qp_ = qp;
}

Status Cm::set_tos(Id* id, uint8_t tos) {
  Lock g(mu_);
  id->tos_ = tos;
  return {};
}

Status Cm::set_ack_timeout(Id* id, uint8_t timeout) {
  if (timeout > 31) return err::inval("ACK timeout " + std::to_string(timeout) + " is above 31");
  Lock g(mu_);
  id->ack_timeout_ = timeout;
  return {};
}

Status Cm::set_reuseaddr(Id* id, bool on) {
  Lock g(mu_);
  if (id->state_ != State::idle) return err::inval("RDMA_OPTION_ID_REUSEADDR: the id is already bound");
  id->reuseaddr_ = on;
  return {};
}

Status Cm::set_afonly(Id* id, bool on) {
  Lock g(mu_);
  if (id->state_ != State::idle) return err::inval("RDMA_OPTION_ID_AFONLY: the id is already bound");
  id->afonly_ = on;
  return {};
}

// ------------------------------------------------------------------ events

void Cm::emit(Event&& ev) noexcept {
  UROCE_LOG(debug, "cm: event %s status %d", to_string(ev.type), ev.status);
  sink_.deliver(std::move(ev));
}

void Cm::emit_simple(Id* id, EventType t, int status) noexcept {
  Event ev;
  ev.type = t;
  ev.id = id;
  ev.status = status;
  emit(std::move(ev));
}

// ------------------------------------------------------------------ timers

Clock::duration Cm::mad_timeout(uint8_t exp) const noexcept {
  const uint64_t us = iba_time_us(exp) + 2 * iba_time_us(cfg_.packet_lifetime);
  return std::chrono::microseconds(std::max<uint64_t>(us, 20'000));
}

Clock::time_point Cm::next_deadline() noexcept {
  Lock g(mu_);
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [local, c] : conns_) next = std::min(next, c->deadline);
  next = ids_.next_orphan_deadline(next);
  return live_.next_deadline(next);
}

void Cm::on_timer() noexcept {
  Lock g(mu_);
  const Clock::time_point t = now();
  std::vector<uint32_t> due;
  for (const auto& [local, c] : conns_)
    if (c->deadline <= t) due.push_back(local);
  for (uint32_t local : due)
    if (Conn* c = conn_by_local(local)) on_conn_timer(*c);
  retry_orphans(0, true);
  live_.on_timer(t);
}

}  // namespace uroce::cm
