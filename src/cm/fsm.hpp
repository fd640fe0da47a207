// The CM's transitions as one table: (state, event [, guard]) -> (action,
// next state).  The Cm looks every transition up here (Cm::step) and does
// what the row names; it changes an id's or a record's state nowhere else
// (Cm::enter).  A pair with no row is refused (an operation: EINVAL),
// ignored (a MAD), or ends the record (destroy, a timer): fsm::miss().
//
// The key is the connection record's state when the id has one, else the
// id's.  Events come from three sources, each with its own file:
//   ids          the application's operations on an id (cm_addr.cpp,
//                cm_connect.cpp, cm.cpp's destroy);
//   connections  MADs after decoding, lookup and their filters (cm_recv.cpp)
//                and the record's timer (cm_conn.cpp);
//   liveness     a peer process found gone (liveness.cpp).
// `UROCE_LOG=trace` prints each step: "cm: 0x00400001 req_sent --rep/take_rep--> established".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cm/cm.hpp"

namespace uroce::cm::fsm {

#define UROCE_FSM_VALUE(n) n,
// clang-format off
#define UROCE_CM_EVENTS(X) \
  /* ids: operations */ \
  X(bind) X(resolve_addr) X(resolve_route) X(set_route) X(listen) X(connect) X(accept) X(reject) \
  X(establish) X(disconnect) X(destroy) \
  /* connections: MADs and the record's timer */ \
  X(req) X(rep) X(rtu) X(rej) X(mra_req) X(mra_rep) X(dreq) X(drep) X(sidr_req) X(sidr_rep_ok) \
  X(sidr_rep_err) X(seek_tick) X(timeout) \
  /* liveness */ \
  X(peer_gone)
#define UROCE_CM_ACTS(X) \
  X(none) \
  X(bind_addr) X(resolve_addr) X(resolve_route) X(set_route) X(start_listen) X(send_req) X(send_sidr_req) \
  X(offer_req) X(offer_sidr_req) X(send_mra_req) X(resend_out) X(accept_req) X(accept_sidr) X(reject_req) \
  X(reject_rep) X(reject_sidr) X(take_rtu) \
  X(take_rep) X(take_rep_no_qp) X(take_mra_req) X(take_mra_rep) X(send_mra_rep) X(resend_rtu) X(send_rtu) \
  X(take_rej) X(take_dreq) X(answer_dreq) X(send_drep) X(send_dreq) X(reply_drep) X(quiesce_qp) \
  X(seek) X(retry) X(give_up_req) X(give_up_rep) X(give_up_sidr) X(exit_timewait) \
  X(destroy_rej_req) X(destroy_rej_req_timeout) X(destroy_rej_rep) X(destroy_sidr_rej) X(destroy_dreq) \
  X(destroy_drep) X(detach) \
  X(gone_disconnect) X(gone_reject)
// clang-format on
enum class Ev : uint8_t { UROCE_CM_EVENTS(UROCE_FSM_VALUE) };
enum class Act : uint8_t { UROCE_CM_ACTS(UROCE_FSM_VALUE) };
#undef UROCE_FSM_VALUE
const char* to_string(Ev e) noexcept;
const char* to_string(Act a) noexcept;

inline constexpr size_t kStateCount = size_t(State::closed) + 1;
inline constexpr size_t kEvCount = size_t(Ev::peer_gone) + 1;

// What a row may depend on besides (state, event).
enum class Guard : uint8_t {
  any,
  qp,            // the id carries a QP (the CM moves it)
  no_qp,         // the application moves its QP itself
  retries_left,  // the MAD to resend has retries left
  retries_out,
  ud,      // a UD id (SIDR)
  not_ud,  // an RC or UC id
};
const char* to_string(Guard g) noexcept;
struct Facts {
  bool qp = false;
  bool retries_left = false;
  bool ud = false;
};
constexpr bool holds(Guard g, const Facts& f) noexcept {
  switch (g) {
    case Guard::any: return true;
    case Guard::qp: return f.qp;
    case Guard::no_qp: return !f.qp;
    case Guard::retries_left: return f.retries_left;
    case Guard::retries_out: return !f.retries_left;
    case Guard::ud: return f.ud;
    case Guard::not_ud: return !f.ud;
  }
  return false;
}

// Entering closed: the record stays for Config::timewait to answer
// duplicates (kKeep); the id is left established, not closed (kIdUp: a UD
// id whose SIDR exchange succeeded).
enum Flag : uint8_t { kKeep = 1, kIdUp = 2 };

struct Row {
  State from;
  Ev ev;
  Guard guard;
  Act act;
  State next;  // after the action
  State fail;  // after an action that failed (Cm::step's `failed`); == next where none can
  uint8_t flags = 0;
};

using S = State;
// clang-format off
inline constexpr Row kTable[] = {
  // ---- ids (operations on an id without a connection record)
  {S::idle,           Ev::bind,          Guard::any, Act::bind_addr,     S::addr_bound,     S::addr_bound},
  {S::idle,           Ev::resolve_addr,  Guard::any, Act::resolve_addr,  S::addr_resolved,  S::idle},
  {S::addr_bound,     Ev::resolve_addr,  Guard::any, Act::resolve_addr,  S::addr_resolved,  S::addr_bound},
  {S::addr_resolved,  Ev::resolve_route, Guard::any, Act::resolve_route, S::route_resolved, S::addr_resolved},
  {S::route_resolved, Ev::resolve_route, Guard::any, Act::resolve_route, S::route_resolved, S::route_resolved},
  {S::addr_resolved,  Ev::set_route,     Guard::any, Act::set_route,     S::route_resolved, S::route_resolved},
  {S::route_resolved, Ev::set_route,     Guard::any, Act::set_route,     S::route_resolved, S::route_resolved},
  {S::addr_bound,     Ev::listen,        Guard::any, Act::start_listen,  S::listen,         S::listen},
  {S::route_resolved, Ev::connect,       Guard::not_ud, Act::send_req,   S::req_sent,       S::req_sent},
  // ---- passive side
  {S::idle,           Ev::req,           Guard::any, Act::offer_req,     S::req_rcvd,       S::req_rcvd},
  {S::req_rcvd,       Ev::req,           Guard::any, Act::send_mra_req,  S::req_rcvd,       S::req_rcvd},
  {S::req_rcvd,       Ev::accept,        Guard::qp,  Act::accept_req,    S::rep_sent,       S::closed},
  {S::req_rcvd,       Ev::accept,        Guard::no_qp, Act::accept_req,  S::rep_sent,       S::rep_sent},
  {S::req_rcvd,       Ev::reject,        Guard::any, Act::reject_req,    S::closed,         S::closed, kKeep},
  {S::req_rcvd,       Ev::rej,           Guard::any, Act::take_rej,      S::closed,         S::closed},
  {S::req_rcvd,       Ev::destroy,       Guard::any, Act::destroy_rej_req, S::closed,       S::closed},
  {S::rep_sent,       Ev::req,           Guard::any, Act::resend_out,    S::rep_sent,       S::rep_sent},
  {S::rep_sent,       Ev::rtu,           Guard::any, Act::take_rtu,      S::established,    S::established},
  {S::rep_sent,       Ev::mra_rep,       Guard::any, Act::take_mra_rep,  S::mra_rep_rcvd,   S::mra_rep_rcvd},
  {S::rep_sent,       Ev::rej,           Guard::any, Act::take_rej,      S::closed,         S::closed},
  {S::rep_sent,       Ev::dreq,          Guard::any, Act::take_dreq,     S::dreq_rcvd,      S::dreq_rcvd},
  {S::rep_sent,       Ev::disconnect,    Guard::any, Act::send_dreq,     S::dreq_sent,      S::dreq_sent},
  {S::rep_sent,       Ev::timeout,       Guard::retries_left, Act::retry,  S::rep_sent,     S::rep_sent},
  {S::rep_sent,       Ev::timeout,       Guard::retries_out, Act::give_up_rep, S::closed,   S::closed},
  {S::rep_sent,       Ev::destroy,       Guard::any, Act::destroy_rej_rep, S::closed,       S::closed},
  {S::rep_sent,       Ev::peer_gone,     Guard::any, Act::gone_reject,   S::closed,         S::closed},
  {S::mra_rep_rcvd,   Ev::req,           Guard::any, Act::resend_out,    S::mra_rep_rcvd,   S::mra_rep_rcvd},
  {S::mra_rep_rcvd,   Ev::rtu,           Guard::any, Act::take_rtu,      S::established,    S::established},
  {S::mra_rep_rcvd,   Ev::mra_rep,       Guard::any, Act::take_mra_rep,  S::mra_rep_rcvd,   S::mra_rep_rcvd},
  {S::mra_rep_rcvd,   Ev::rej,           Guard::any, Act::take_rej,      S::closed,         S::closed},
  {S::mra_rep_rcvd,   Ev::dreq,          Guard::any, Act::take_dreq,     S::dreq_rcvd,      S::dreq_rcvd},
  {S::mra_rep_rcvd,   Ev::disconnect,    Guard::any, Act::send_dreq,     S::dreq_sent,      S::dreq_sent},
  {S::mra_rep_rcvd,   Ev::timeout,       Guard::retries_left, Act::retry,  S::mra_rep_rcvd, S::mra_rep_rcvd},
  {S::mra_rep_rcvd,   Ev::timeout,       Guard::retries_out, Act::give_up_rep, S::closed,   S::closed},
  {S::mra_rep_rcvd,   Ev::destroy,       Guard::any, Act::destroy_rej_rep, S::closed,       S::closed},
  {S::mra_rep_rcvd,   Ev::peer_gone,     Guard::any, Act::gone_reject,   S::closed,         S::closed},
  // ---- active side
  {S::req_sent,       Ev::rep,           Guard::qp,  Act::take_rep,      S::established,    S::closed},
  {S::req_sent,       Ev::rep,           Guard::no_qp, Act::take_rep_no_qp, S::rep_rcvd,    S::rep_rcvd},
  {S::req_sent,       Ev::mra_req,       Guard::any, Act::take_mra_req,  S::mra_req_rcvd,   S::mra_req_rcvd},
  {S::req_sent,       Ev::rej,           Guard::any, Act::take_rej,      S::closed,         S::closed},
  {S::req_sent,       Ev::seek_tick,     Guard::any, Act::seek,          S::req_sent,       S::req_sent},
  {S::req_sent,       Ev::timeout,       Guard::retries_left, Act::retry,  S::req_sent,     S::req_sent},
  {S::req_sent,       Ev::timeout,       Guard::retries_out, Act::give_up_req, S::closed,   S::closed},
  {S::req_sent,       Ev::destroy,       Guard::any, Act::destroy_rej_req_timeout, S::closed, S::closed},
  {S::req_sent,       Ev::peer_gone,     Guard::any, Act::gone_reject,   S::closed,         S::closed},
  {S::mra_req_rcvd,   Ev::rep,           Guard::qp,  Act::take_rep,      S::established,    S::closed},
  {S::mra_req_rcvd,   Ev::rep,           Guard::no_qp, Act::take_rep_no_qp, S::rep_rcvd,    S::rep_rcvd},
  {S::mra_req_rcvd,   Ev::mra_req,       Guard::any, Act::take_mra_req,  S::mra_req_rcvd,   S::mra_req_rcvd},
  {S::mra_req_rcvd,   Ev::rej,           Guard::any, Act::take_rej,      S::closed,         S::closed},
  {S::mra_req_rcvd,   Ev::timeout,       Guard::retries_left, Act::retry,  S::mra_req_rcvd, S::mra_req_rcvd},
  {S::mra_req_rcvd,   Ev::timeout,       Guard::retries_out, Act::give_up_req, S::closed,   S::closed},
  {S::mra_req_rcvd,   Ev::destroy,       Guard::any, Act::destroy_rej_req_timeout, S::closed, S::closed},
  {S::mra_req_rcvd,   Ev::peer_gone,     Guard::any, Act::gone_reject,   S::closed,         S::closed},
  {S::rep_rcvd,       Ev::rep,           Guard::any, Act::send_mra_rep,  S::rep_rcvd,       S::rep_rcvd},
  {S::rep_rcvd,       Ev::establish,     Guard::any, Act::send_rtu,      S::established,    S::established},
  {S::rep_rcvd,       Ev::reject,        Guard::any, Act::reject_rep,    S::closed,         S::closed, kKeep},
  {S::rep_rcvd,       Ev::rej,           Guard::any, Act::take_rej,      S::closed,         S::closed},
  {S::rep_rcvd,       Ev::destroy,       Guard::any, Act::destroy_rej_rep, S::closed,       S::closed},
  {S::rep_rcvd,       Ev::peer_gone,     Guard::any, Act::gone_reject,   S::closed,         S::closed},
  // ---- both sides: connected and tearing down
  {S::established,    Ev::rep,           Guard::any, Act::resend_rtu,    S::established,    S::established},
  {S::established,    Ev::dreq,          Guard::any, Act::take_dreq,     S::dreq_rcvd,      S::dreq_rcvd},
  {S::established,    Ev::disconnect,    Guard::any, Act::send_dreq,     S::dreq_sent,      S::dreq_sent},
  {S::established,    Ev::destroy,       Guard::any, Act::destroy_dreq,  S::dreq_sent,      S::dreq_sent},
  {S::established,    Ev::peer_gone,     Guard::any, Act::gone_disconnect, S::dreq_rcvd,    S::dreq_rcvd},
  {S::dreq_sent,      Ev::drep,          Guard::any, Act::none,          S::timewait,       S::timewait},
  {S::dreq_sent,      Ev::dreq,          Guard::any, Act::answer_dreq,   S::timewait,       S::timewait},
  {S::dreq_sent,      Ev::disconnect,    Guard::any, Act::quiesce_qp,    S::dreq_sent,      S::dreq_sent},
  {S::dreq_sent,      Ev::timeout,       Guard::retries_left, Act::retry,  S::dreq_sent,    S::dreq_sent},
  {S::dreq_sent,      Ev::timeout,       Guard::retries_out, Act::none,  S::timewait,       S::timewait},
  {S::dreq_sent,      Ev::destroy,       Guard::any, Act::detach,        S::dreq_sent,      S::dreq_sent},
  {S::dreq_sent,      Ev::peer_gone,     Guard::any, Act::none,          S::timewait,       S::timewait},
  {S::dreq_rcvd,      Ev::disconnect,    Guard::any, Act::reply_drep,    S::timewait,       S::timewait},
  {S::dreq_rcvd,      Ev::destroy,       Guard::any, Act::destroy_drep,  S::timewait,       S::timewait},
  {S::timewait,       Ev::dreq,          Guard::any, Act::send_drep,     S::timewait,       S::timewait},
  {S::timewait,       Ev::disconnect,    Guard::any, Act::quiesce_qp,    S::timewait,       S::timewait},
  {S::timewait,       Ev::destroy,       Guard::any, Act::detach,        S::timewait,       S::timewait},
  {S::timewait,       Ev::timeout,       Guard::any, Act::exit_timewait, S::closed,         S::closed},
  // ---- a record kept closed to answer duplicates (and an id whose connection ended)
  {S::closed,         Ev::req,           Guard::any, Act::resend_out,    S::closed,         S::closed, kKeep},
  {S::closed,         Ev::sidr_req,      Guard::any, Act::resend_out,    S::closed,         S::closed, kKeep},
  {S::closed,         Ev::dreq,          Guard::any, Act::send_drep,     S::closed,         S::closed, kKeep},
  {S::closed,         Ev::disconnect,    Guard::any, Act::quiesce_qp,    S::closed,         S::closed, kKeep},
  // ---- SIDR (UD)
  {S::route_resolved, Ev::connect,       Guard::ud,  Act::send_sidr_req, S::sidr_req_sent,  S::sidr_req_sent},
  {S::sidr_req_sent,  Ev::sidr_rep_ok,   Guard::any, Act::none,          S::closed,         S::closed, kIdUp},
  {S::sidr_req_sent,  Ev::sidr_rep_err,  Guard::any, Act::none,          S::closed,         S::closed},
  {S::sidr_req_sent,  Ev::seek_tick,     Guard::any, Act::seek,          S::sidr_req_sent,  S::sidr_req_sent},
  {S::sidr_req_sent,  Ev::timeout,       Guard::retries_left, Act::retry,  S::sidr_req_sent, S::sidr_req_sent},
  {S::sidr_req_sent,  Ev::timeout,       Guard::retries_out, Act::give_up_sidr, S::closed,  S::closed},
  {S::idle,           Ev::sidr_req,      Guard::any, Act::offer_sidr_req, S::sidr_req_rcvd, S::sidr_req_rcvd},
  {S::sidr_req_rcvd,  Ev::accept,        Guard::any, Act::accept_sidr,   S::closed,         S::closed, kKeep | kIdUp},
  {S::sidr_req_rcvd,  Ev::reject,        Guard::any, Act::reject_sidr,   S::closed,         S::closed, kKeep},
  {S::sidr_req_rcvd,  Ev::destroy,       Guard::any, Act::destroy_sidr_rej, S::closed,      S::closed},
};
// clang-format on

// The first row for (s, e) whose guard holds, or null.
constexpr const Row* find(State s, Ev e, const Facts& f) noexcept {
  for (const Row& r : kTable)
    if (r.from == s && r.ev == e && holds(r.guard, f)) return &r;
  return nullptr;
}
// Whether (s, e) has a row under some guard.
constexpr bool has_row(State s, Ev e) noexcept {
  for (const Row& r : kTable)
    if (r.from == s && r.ev == e) return true;
  return false;
}

// What a pair with no row means.
enum class Miss : uint8_t {
  refuse,  // an operation: EINVAL naming the state
  ignore,  // a MAD that does not fit (a stale or duplicate one), a peer check
  close,   // destroy: the record goes, nothing is sent
  drop,    // a timer on a record with nothing to wait for: it goes
};
constexpr Miss miss(Ev e) noexcept {
  if (e == Ev::destroy) return Miss::close;
  if (e == Ev::timeout) return Miss::drop;
  if (e < Ev::req) return Miss::refuse;
  return Miss::ignore;
}

// One line per row ("req_sent rep [qp] -> take_rep -> established | closed"),
// for the golden test and for reading.
std::string dump();

}  // namespace uroce::cm::fsm
