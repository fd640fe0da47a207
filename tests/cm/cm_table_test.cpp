// The CM's transition table (src/cm/fsm.hpp) checked as data: every (state,
// event) pair has one outcome, guards split cleanly, the fail states and
// flags sit where actions can fail or close, the IBA 12.9.6 transitions are
// there, and the liveness and timer states derive from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cm/fsm.hpp"

namespace uroce::cm {
namespace {

using fsm::Act;
using fsm::Ev;
using fsm::Guard;
using fsm::kTable;
using fsm::Row;

State state_at(size_t i) { return State(i); }
Ev ev_at(size_t i) { return Ev(i); }

std::set<State> states_with(Ev e) {
  std::set<State> out;
  for (const Row& r : kTable)
    if (r.ev == e) out.insert(r.from);
  return out;
}

bool is_operation(Ev e) { return e < Ev::req; }

TEST(CmTable, NamesAreDistinctAndComplete) {
  std::set<std::string> evs, acts;
  for (size_t i = 0; i < fsm::kEvCount; ++i) {
    const std::string n = fsm::to_string(ev_at(i));
    EXPECT_NE(n, "?");
    EXPECT_TRUE(evs.insert(n).second) << n;
  }
  EXPECT_STREQ(fsm::to_string(Ev(fsm::kEvCount)), "?");
  for (size_t i = 0; i <= size_t(Act::gone_reject); ++i) EXPECT_TRUE(acts.insert(fsm::to_string(Act(i))).second);
  EXPECT_STREQ(fsm::to_string(Act(size_t(Act::gone_reject) + 1)), "?");
  EXPECT_STREQ(fsm::to_string(Guard::retries_out), "retries_out");
}

// Per (state, event): one row with no guard, or exactly one complementary
// pair, so that the facts always pick exactly one row.
TEST(CmTable, GuardsPartition) {
  std::map<std::pair<State, Ev>, std::multiset<Guard>> guards;
  for (const Row& r : kTable) guards[{r.from, r.ev}].insert(r.guard);
  const std::vector<std::multiset<Guard>> allowed = {
      {Guard::any}, {Guard::qp, Guard::no_qp}, {Guard::retries_left, Guard::retries_out}, {Guard::ud, Guard::not_ud}};
  for (const auto& [key, g] : guards) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || g == a;
    EXPECT_TRUE(ok) << to_string(key.first) << " " << fsm::to_string(key.second);
  }
  for (bool qp : {false, true})
    for (bool left : {false, true})
      for (bool ud : {false, true})
        for (const auto& [key, g] : guards)
          EXPECT_NE(fsm::find(key.first, key.second, {qp, left, ud}), nullptr)
              << to_string(key.first) << " " << fsm::to_string(key.second);
}

// Every pair has an outcome: a row, or what miss() says.  MADs, timers and
// the liveness check reach connection states only (the creation rows
// aside: a REQ or SIDR_REQ makes a record in idle).
TEST(CmTable, EveryPairHasAnOutcome) {
  for (size_t s = 0; s < fsm::kStateCount; ++s)
    for (size_t e = 0; e < fsm::kEvCount; ++e) {
      const State st = state_at(s);
      const Ev ev = ev_at(e);
      if (fsm::has_row(st, ev)) continue;
      const fsm::Miss m = fsm::miss(ev);
      if (ev == Ev::destroy)
        EXPECT_EQ(m, fsm::Miss::close);
      else if (ev == Ev::timeout)
        EXPECT_EQ(m, fsm::Miss::drop);
      else if (is_operation(ev))
        EXPECT_EQ(m, fsm::Miss::refuse);
      else
        EXPECT_EQ(m, fsm::Miss::ignore);
    }
  const std::set<State> id_only = {State::addr_bound, State::addr_resolved, State::route_resolved, State::listen};
  for (const Row& r : kTable) {
    if (is_operation(r.ev)) continue;
    EXPECT_FALSE(id_only.count(r.from)) << to_string(r.from) << " " << fsm::to_string(r.ev);
    if (r.from == State::idle) {
      EXPECT_TRUE(r.ev == Ev::req || r.ev == Ev::sidr_req) << fsm::to_string(r.ev);
    }
  }
}

TEST(CmTable, FailOnlyWhereActionsCanFailAndFlagsOnlyOnClosing) {
  const std::set<Act> can_fail = {Act::take_rep, Act::accept_req, Act::resolve_addr, Act::resolve_route};
  for (const Row& r : kTable) {
    if (r.fail != r.next) {
      EXPECT_TRUE(can_fail.count(r.act)) << fsm::to_string(r.act);
    }
    if (r.flags) {
      EXPECT_EQ(r.next, State::closed) << fsm::to_string(r.act);
    }
    if (r.flags & fsm::kIdUp) {
      EXPECT_TRUE(r.from == State::sidr_req_rcvd || r.from == State::sidr_req_sent);
    }
  }
  // ADDR_ERROR and ROUTE_ERROR leave the state as it was.
  for (const Row& r : kTable)
    if (r.act == Act::resolve_addr || r.act == Act::resolve_route) {
      EXPECT_EQ(r.fail, r.from);
    }
  // An accept whose QP cannot be moved, and a REP whose QP cannot, end the
  // connection.
  EXPECT_EQ(fsm::find(State::req_rcvd, Ev::accept, {true, false, false})->fail, State::closed);
  EXPECT_EQ(fsm::find(State::req_sent, Ev::rep, {true, false, false})->fail, State::closed);
}

// The states whose peer process is watched, and those that wait on a timer.
TEST(CmTable, LivenessAndTimersDeriveFromTheTable) {
  EXPECT_EQ(states_with(Ev::peer_gone),
            (std::set<State>{State::req_sent, State::mra_req_rcvd, State::rep_rcvd, State::rep_sent,
                             State::mra_rep_rcvd, State::established, State::dreq_sent}));
  EXPECT_EQ(states_with(Ev::timeout),
            (std::set<State>{State::req_sent, State::mra_req_rcvd, State::rep_sent, State::mra_rep_rcvd,
                             State::dreq_sent, State::sidr_req_sent, State::timewait}));
  EXPECT_EQ(states_with(Ev::seek_tick), (std::set<State>{State::req_sent, State::sidr_req_sent}));
}

// The transitions of IBA vol. 1 12.9.6 (and 12.11 for SIDR) that uroce
// implements, as (state, event, facts) -> next.
TEST(CmTable, MatchesTheIbaDiagram) {
  struct T {
    State from;
    Ev ev;
    fsm::Facts f;
    State next;
  };
  const fsm::Facts qp{true, false, false}, no_qp{false, false, false}, left{false, true, false},
      out{false, false, false};
  const T cases[] = {
      {State::req_sent, Ev::rep, qp, State::established},
      {State::req_sent, Ev::rep, no_qp, State::rep_rcvd},
      {State::req_sent, Ev::mra_req, qp, State::mra_req_rcvd},
      {State::req_sent, Ev::rej, qp, State::closed},
      {State::req_sent, Ev::timeout, left, State::req_sent},
      {State::req_sent, Ev::timeout, out, State::closed},
      {State::mra_req_rcvd, Ev::rep, qp, State::established},
      {State::rep_rcvd, Ev::establish, qp, State::established},
      {State::idle, Ev::req, qp, State::req_rcvd},
      {State::req_rcvd, Ev::accept, qp, State::rep_sent},
      {State::req_rcvd, Ev::reject, qp, State::closed},
      {State::rep_sent, Ev::rtu, qp, State::established},
      {State::rep_sent, Ev::mra_rep, qp, State::mra_rep_rcvd},
      {State::mra_rep_rcvd, Ev::rtu, qp, State::established},
      {State::rep_sent, Ev::timeout, out, State::closed},
      {State::established, Ev::dreq, qp, State::dreq_rcvd},
      {State::established, Ev::disconnect, qp, State::dreq_sent},
      {State::dreq_sent, Ev::drep, qp, State::timewait},
      {State::dreq_sent, Ev::dreq, qp, State::timewait},
      {State::dreq_sent, Ev::timeout, out, State::timewait},
      {State::dreq_rcvd, Ev::disconnect, qp, State::timewait},
      {State::timewait, Ev::timeout, out, State::closed},
      {State::sidr_req_sent, Ev::sidr_rep_ok, qp, State::closed},
      {State::sidr_req_sent, Ev::sidr_rep_err, qp, State::closed},
      {State::idle, Ev::sidr_req, qp, State::sidr_req_rcvd},
      {State::sidr_req_rcvd, Ev::accept, qp, State::closed},
  };
  for (const T& t : cases) {
    const Row* r = fsm::find(t.from, t.ev, t.f);
    ASSERT_NE(r, nullptr) << to_string(t.from) << " " << fsm::to_string(t.ev);
    EXPECT_EQ(r->next, t.next) << to_string(t.from) << " " << fsm::to_string(t.ev);
  }
  // Where uroce goes beyond the diagram: the id of a SIDR exchange that
  // succeeded is established (rdma_cm's view) while its record closes;
  // DREQ in rep_sent (the RTU was lost) disconnects; there is no state
  // for an MRA we sent (ours go out only for duplicates).
  EXPECT_TRUE(fsm::find(State::sidr_req_sent, Ev::sidr_rep_ok, {})->flags & fsm::kIdUp);
  EXPECT_EQ(fsm::find(State::rep_sent, Ev::dreq, {})->next, State::dreq_rcvd);
  EXPECT_EQ(fsm::find(State::req_rcvd, Ev::req, {})->act, Act::send_mra_req);
  EXPECT_EQ(fsm::find(State::req_rcvd, Ev::req, {})->next, State::req_rcvd);
}

// connect picks the handshake by the id's QP type.
TEST(CmTable, ConnectIsReqOrSidr) {
  EXPECT_EQ(fsm::find(State::route_resolved, Ev::connect, {false, false, false})->act, Act::send_req);
  EXPECT_EQ(fsm::find(State::route_resolved, Ev::connect, {false, false, true})->act, Act::send_sidr_req);
  EXPECT_EQ(fsm::find(State::addr_resolved, Ev::connect, {}), nullptr);
}

TEST(CmTable, DumpHasOneLinePerRow) {
  const std::string d = fsm::dump();
  EXPECT_EQ(size_t(std::count(d.begin(), d.end(), '\n')), std::size(kTable));
  EXPECT_NE(d.find("req_sent rep [qp] -> take_rep -> established | closed\n"), std::string::npos) << d;
  EXPECT_NE(d.find("sidr_req_rcvd accept -> accept_sidr -> closed keep id-up\n"), std::string::npos) << d;
}

}  // namespace
}  // namespace uroce::cm
