// Hostile traffic: hand-built packets that must be refused before a byte
// moves, each counted under its reason, with every region of the victim
// between guard pages (hostile.hpp).
#include "hostile.hpp"

#include <functional>
#include <random>

namespace uroce::test {
namespace {

using wire::AckType;
using wire::NakCode;
using wire::Opcode;

std::vector<uint8_t> bytes(size_t n, uint8_t v = 0xab) { return std::vector<uint8_t>(n, v); }

// The NAKs (type, code) among the victim's answers.
std::vector<std::pair<AckType, uint8_t>> naks(const std::vector<wire::Headers>& hs) {
  std::vector<std::pair<AckType, uint8_t>> out;
  for (const auto& h : hs)
    if (h.bth.opcode == uint8_t(Opcode::rc_ack) && wire::aeth_type(h.aeth.syndrome) != AckType::ack)
      out.emplace_back(wire::aeth_type(h.aeth.syndrome), wire::aeth_value(h.aeth.syndrome));
  return out;
}
bool has_read_data(const std::vector<wire::Headers>& hs) {
  for (const auto& h : hs)
    if (wire::info(h.bth.opcode).flags & wire::op::kRead) return true;
  return false;
}

// RC answers a request it refuses as IBA class C: the NAK, then the QP in
// ERR, which ends a connection at its first bad request.  So each attack
// goes to a victim of its own, to be seen refused on its own merits: one
// NAK of `code`, no READ data, the QP (`none`: the QP without rights) in
// ERR, no byte moved.  Returns the victim's counters.
using Attack = std::function<std::vector<uint8_t>(Victim&)>;
transport::Counters attack_alone(const Attack& make, NakCode code, const char* what, bool none = false) {
  Victim v;
  v.send1(make(v));
  auto a = v.answers();
  EXPECT_FALSE(has_read_data(a)) << what;
  EXPECT_EQ(naks(a), (std::vector<std::pair<AckType, uint8_t>>{{AckType::nak, uint8_t(code)}})) << what;
  EXPECT_EQ((none ? v.qp_none : v.qp)->query().qp_state, QpState::err) << what;
  v.expect_untouched(what);
  const auto c = v.counters();
  EXPECT_EQ(c.resp_qp_errors, 1u) << what;
  return c;
}
transport::Counters& operator+=(transport::Counters& a, const transport::Counters& b) {
  a.resp_bounds_errors += b.resp_bounds_errors;
  a.resp_misaligned_atomics += b.resp_misaligned_atomics;
  a.resp_rights_errors += b.resp_rights_errors;
  a.resp_pd_errors += b.resp_pd_errors;
  a.resp_len_errors += b.resp_len_errors;
  a.resp_opcode_seq_errors += b.resp_opcode_seq_errors;
  return a;
}

// The harness sees a legitimate WRITE land (so "untouched" means something).
TEST(Hostile, ControlValidWriteLands) {
  Victim v;
  v.send1(Victim::packet(write_only(v.qp->qpn(), v.epsn++, v.all.addr() + 100, v.all.rkey(), 64), bytes(64, 0x5a)));
  EXPECT_EQ(v.all.mem->data()[100], 0x5a);
  EXPECT_EQ(v.all.mem->data()[163], 0x5a);
  EXPECT_EQ(v.all.mem->data()[164], v.all.snapshot[164]);
  auto a = v.answers();
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(wire::aeth_type(a.back().aeth.syndrome), AckType::ack);
}

TEST(Hostile, BadIcrcIsDropped) {
  Victim v;
  auto p = Victim::packet(write_only(v.qp->qpn(), v.epsn, v.all.addr(), v.all.rkey(), 64), bytes(64));
  auto spoiled_icrc = p;
  spoiled_icrc.back() ^= 0x01;
  auto spoiled_payload = p;
  spoiled_payload[40] ^= 0x80;  // in the data: the ICRC no longer matches
  auto spoiled_header = p;
  spoiled_header[20] ^= 0x01;  // in the RETH's rkey
  v.send({spoiled_icrc, spoiled_payload, spoiled_header});
  const auto c = v.counters();
  EXPECT_EQ(c.rx_icrc_bad, 3u);
  EXPECT_EQ(c.resp_duplicates + c.resp_future_psn + c.resp_acks_sent, 0u);
  EXPECT_TRUE(v.answers().empty());
  v.expect_untouched("bad ICRC");
}

TEST(Hostile, MalformedAndTruncatedAreDropped) {
  Victim v;
  auto p = Victim::packet(write_only(v.qp->qpn(), v.epsn, v.all.addr(), v.all.rkey(), 64), bytes(64));
  std::vector<std::vector<uint8_t>> bad;
  bad.emplace_back(p.begin(), p.begin() + 11);  // shorter than a BTH
  bad.emplace_back(p.begin(), p.begin() + 30);  // RETH cut
  auto unknown = p;
  unknown[0] = 0x1f;  // no such opcode
  bad.push_back(unknown);
  auto tver = p;
  tver[1] |= 0x0f;  // TVer 15
  bad.push_back(tver);
  v.send(bad);
  EXPECT_EQ(v.counters().rx_malformed, 4u);
  v.expect_untouched("malformed");
}

TEST(Hostile, UnknownQpnIsDropped) {
  Victim v;
  std::vector<std::vector<uint8_t>> pkts;
  const uint32_t mine = v.qp->qpn();
  for (uint32_t q : {0u, 1u, mine + 100, mine ^ 0x4000, 0xffffffu})  // unused index, another process's slot
    pkts.push_back(Victim::packet(write_only(q, v.epsn, v.all.addr(), v.all.rkey(), 64), bytes(64)));
  v.send(pkts);
  EXPECT_EQ(v.counters().rx_unknown_qp, 5u);
  EXPECT_TRUE(v.answers().empty());
  v.expect_untouched("unknown QPN");
}

TEST(Hostile, ForeignSourceIsDropped) {
  Victim v;
  // Everything right (QPN, PSN, rkey, ICRC for its own addresses) but the
  // sender's address is not the peer's.
  auto p = Victim::packet(write_only(v.qp->qpn(), v.epsn, v.all.addr(), v.all.rkey(), 64), bytes(64), kForeignIp);
  auto r = Victim::packet(read_req(v.qp->qpn(), v.epsn, v.all.addr(), v.all.rkey(), 64), {}, kForeignIp);
  v.send({p, r}, /*foreign=*/true);
  EXPECT_EQ(v.counters().rx_foreign_source, 2u);
  EXPECT_TRUE(v.answers().empty());
  std::vector<net::RxPacket> rx(8);
  EXPECT_EQ(v.foreigner->recv_batch(rx), 0u) << "the victim answered a stranger";
  v.expect_untouched("foreign source");
}

TEST(Hostile, WrongServiceAndStateAreDropped) {
  Victim v;
  wire::Headers ud = bth(uint8_t(Opcode::ud_send_only), v.qp->qpn(), v.epsn, false);
  ud.deth = {0x11111111, 0x42};
  wire::Headers uc = bth(uint8_t(Opcode::uc_write_only), v.qp->qpn(), v.epsn, false);
  uc.reth = {v.all.addr(), v.all.rkey(), 64};
  v.send({Victim::packet(ud, bytes(64)), Victim::packet(uc, bytes(64))});
  EXPECT_EQ(v.counters().rx_wrong_service, 2u);
  // A QP in RESET or INIT receives nothing.
  auto fresh = v.make_qp(access::kRemoteWrite, kPeerQpn + 2);
  QpAttr a;
  a.qp_state = QpState::reset;
  ASSERT_TRUE(fresh->modify(a, qp_attr_mask::kState).ok());
  v.send1(Victim::packet(write_only(fresh->qpn(), kRqPsn, v.all.addr(), v.all.rkey(), 64), bytes(64)));
  EXPECT_EQ(v.counters().rx_bad_state, 1u);
  v.expect_untouched("wrong service / state");
}

TEST(Hostile, StalePsnsAreDuplicatesThatChangeNothing) {
  Victim v;
  // Everything valid, but PSNs the victim has already passed: IBA's
  // duplicate region is the 2^23 PSNs before the expected one.
  std::vector<std::vector<uint8_t>> pkts;
  for (uint32_t back : {1u, 2u, 1000u, (1u << 23) - 1, 1u << 23})
    pkts.push_back(Victim::packet(write_only(v.qp->qpn(), (v.epsn - back) & 0xffffff, v.all.addr(), v.all.rkey(), 64),
                                  bytes(64, 0xee)));
  // Duplicate READs and atomics that match no remembered request.
  pkts.push_back(Victim::packet(read_req(v.qp->qpn(), v.epsn - 5, v.all.addr(), v.all.rkey(), 64), {}));
  pkts.push_back(Victim::packet(fetch_add(v.qp->qpn(), v.epsn - 7, v.all.addr(), v.all.rkey(), 1), {}));
  v.send(pkts);
  const auto c = v.counters();
  EXPECT_EQ(c.resp_duplicates, 7u);
  EXPECT_EQ(c.resp_dup_unmatched, 2u);
  EXPECT_EQ(c.resp_dup_reads + c.resp_dup_atomics, 0u);
  auto a = v.answers();
  EXPECT_FALSE(has_read_data(a)) << "a stale READ was answered with data";
  for (const auto& h : a) EXPECT_NE(h.bth.opcode, uint8_t(Opcode::rc_atomic_ack));
  v.expect_untouched("stale PSNs");
  // The expected PSN did not move: a valid packet still lands.
  v.send1(Victim::packet(write_only(v.qp->qpn(), v.epsn++, v.all.addr(), v.all.rkey(), 8), bytes(8, 0x77)));
  EXPECT_EQ(v.all.mem->data()[0], 0x77);
}

TEST(Hostile, FuturePsnsDrawOneSequenceNakAndChangeNothing) {
  Victim v;
  std::vector<std::vector<uint8_t>> pkts;
  for (uint32_t ahead : {1u, 2u, 500u, (1u << 23) - 1})
    pkts.push_back(Victim::packet(write_only(v.qp->qpn(), (v.epsn + ahead) & 0xffffff, v.all.addr(), v.all.rkey(), 64),
                                  bytes(64, 0xee)));
  pkts.push_back(Victim::packet(read_req(v.qp->qpn(), v.epsn + 3, v.all.addr(), v.all.rkey(), 64), {}));
  pkts.push_back(Victim::packet(fetch_add(v.qp->qpn(), v.epsn + 9, v.all.addr(), v.all.rkey(), 1), {}));
  v.send(pkts);
  EXPECT_EQ(v.counters().resp_future_psn, 6u);
  auto a = v.answers();
  EXPECT_FALSE(has_read_data(a));
  auto n = naks(a);
  ASSERT_EQ(n.size(), 1u) << "one PSN-sequence NAK per gap";
  EXPECT_EQ(n[0], std::make_pair(AckType::nak, uint8_t(NakCode::psn_sequence_error)));
  EXPECT_EQ(a.back().bth.psn, v.epsn);
  v.expect_untouched("future PSNs");
}

// The port's P_Key table is the default key alone: a packet of another
// partition (or with an invalid key) is dropped before anything else looks
// at it, as rxe drops it; a limited member of the default partition
// (0x7FFF) matches the full member 0xFFFF and is served.
TEST(Hostile, ForeignPartitionsAreDropped) {
  Victim v;
  std::vector<std::vector<uint8_t>> pkts;
  for (uint16_t pkey : {0x0000, 0x8000, 0x1234, 0x7ffe, 0xfffe}) {
    wire::Headers h = write_only(v.qp->qpn(), v.epsn, v.all.addr() + 8, v.all.rkey(), 64);
    h.bth.pkey = pkey;
    pkts.push_back(Victim::packet(h, bytes(64, 0x11)));
  }
  v.send(pkts);
  auto c = v.counters();
  EXPECT_EQ(c.rx_pkey_violations, 5u);
  EXPECT_EQ(c.resp_acks_sent + c.resp_future_psn + c.resp_duplicates + c.resp_rkey_errors, 0u);
  EXPECT_TRUE(v.answers().empty()) << "dropped silently, not NAKed";
  v.expect_untouched("foreign P_Keys");

  wire::Headers h = write_only(v.qp->qpn(), v.epsn++, v.all.addr() + 8, v.all.rkey(), 64);
  h.bth.pkey = 0x7fff;
  v.send1(Victim::packet(h, bytes(64, 0x22)));
  EXPECT_EQ(v.all.mem->data()[8], 0x22) << "a limited member of the default partition is served";
  EXPECT_EQ(v.counters().rx_pkey_violations, 5u);
}

static_assert(wire::pkey_matches(0xffff, 0xffff) && wire::pkey_matches(0x7fff, 0xffff) &&
              wire::pkey_matches(0xffff, 0x7fff) && !wire::pkey_matches(0x7fff, 0x7fff) &&
              !wire::pkey_matches(0x8000, 0x8000) && !wire::pkey_matches(0x0000, 0xffff));

TEST(Hostile, GuessedRkeysAreRefused) {
  Victim v;
  std::mt19937_64 rng(2024);
  constexpr int kGuesses = 3000;
  std::vector<std::vector<uint8_t>> pkts;
  for (int i = 0; i < kGuesses; ++i) {
    uint32_t key = uint32_t(rng());
    if (key == v.all.rkey() || key == v.write_only.rkey() || key == v.other_pd.rkey() || key == v.read_only.rkey())
      continue;
    switch (i % 3) {
      case 0: pkts.push_back(Victim::packet(write_only(v.qp->qpn(), v.epsn, v.all.addr(), key, 64), bytes(64))); break;
      case 1: pkts.push_back(Victim::packet(read_req(v.qp->qpn(), v.epsn, v.all.addr(), key, 64), {})); break;
      default: pkts.push_back(Victim::packet(fetch_add(v.qp->qpn(), v.epsn, v.all.addr(), key, 1), {})); break;
    }
  }
  // Local keys are no remote keys either (they name the same regions).
  pkts.push_back(Victim::packet(write_only(v.qp->qpn(), v.epsn, v.all.addr(), v.all.mr->lkey(), 64), bytes(64)));
  v.send(pkts);
  // The first wrong key ends the connection (IBA class C, as rxe): one NAK,
  // the QP in ERR, and every later guess is dropped unanswered.
  const auto c = v.counters();
  EXPECT_EQ(c.resp_rkey_errors, 1u);
  EXPECT_EQ(c.resp_qp_errors, 1u);
  EXPECT_EQ(c.rx_bad_state, pkts.size() - 1);
  EXPECT_EQ(v.qp->query().qp_state, QpState::err);
  auto a = v.answers();
  EXPECT_FALSE(has_read_data(a));
  EXPECT_EQ(naks(a), (std::vector<std::pair<AckType, uint8_t>>{{AckType::nak, uint8_t(NakCode::remote_access_error)}}));
  v.expect_untouched("guessed rkeys");
}

TEST(Hostile, OutOfRangeAddressesAndLengthsAreRefused) {
  auto base = [](Victim& v) { return v.all.addr(); };
  auto end = [](Victim& v) { return v.all.addr() + Victim::kRegion; };
  auto w = [](Victim& v, uint64_t va, uint32_t len, size_t n) {
    return Victim::packet(write_only(v.qp->qpn(), v.epsn, va, v.all.rkey(), len), bytes(n));
  };
  auto r = [](Victim& v, uint64_t va, uint32_t len) {
    return Victim::packet(read_req(v.qp->qpn(), v.epsn, va, v.all.rkey(), len), {});
  };
  auto f = [](Victim& v, uint64_t va) {
    return Victim::packet(fetch_add(v.qp->qpn(), v.epsn, va, v.all.rkey(), 1), {});
  };
  const std::vector<std::pair<const char*, Attack>> attacks = {
      // WRITEs: one byte before, one byte past, far past, wrapping around, huge lengths.
      {"write before", [&](Victim& v) { return w(v, base(v) - 1, 64, 64); }},
      {"write past", [&](Victim& v) { return w(v, end(v) - 63, 64, 64); }},
      {"write at end", [&](Victim& v) { return w(v, end(v), 1, 1); }},
      {"write wrapping", [&](Victim& v) { return w(v, ~0ull - 10, 64, 64); }},
      {"write huge", [&](Victim& v) { return w(v, base(v), 0xffffffffu, 64); }},
      {"write at 0", [&](Victim& v) { return w(v, 0, 64, 64); }},
      // READs: the same, including a length that overflows 32-bit arithmetic.
      {"read before", [&](Victim& v) { return r(v, base(v) - 4096, 4096); }},
      {"read past", [&](Victim& v) { return r(v, end(v) - 100, 101); }},
      {"read long", [&](Victim& v) { return r(v, base(v), uint32_t(Victim::kRegion) + 1); }},
      {"read huge", [&](Victim& v) { return r(v, base(v), 0x7fffffffu); }},
      // Atomics: past the end, before the start.
      {"atomic past", [&](Victim& v) { return f(v, end(v)); }},
      {"atomic before", [&](Victim& v) { return f(v, base(v) - 8); }},
  };
  transport::Counters sum;
  for (const auto& [what, make] : attacks) sum += attack_alone(make, NakCode::remote_access_error, what);
  EXPECT_EQ(sum.resp_bounds_errors, attacks.size());
  // Straddling the end, and misaligned: an invalid request before the bounds.
  sum += attack_alone([&](Victim& v) { return f(v, end(v) - 4); }, NakCode::invalid_request, "atomic misaligned");
  EXPECT_EQ(sum.resp_misaligned_atomics, 1u);
  EXPECT_EQ(sum.resp_bounds_errors, attacks.size());
}

TEST(Hostile, WritesLongerThanTheirRethAreRefused) {
  {
    Victim v;
    const uint32_t q = v.qp->qpn(), k = v.all.rkey();
    // WRITE_FIRST announcing 1100 bytes (MTU 1024), then a LAST carrying 1024:
    // the payload would run 948 bytes past the announced length.
    wire::Headers first = bth(uint8_t(Opcode::rc_write_first), q, v.epsn, false);
    first.reth = {v.all.addr() + Victim::kRegion - 1100, k, 1100};
    wire::Headers last = bth(uint8_t(Opcode::rc_write_last), q, v.epsn + 1);
    v.send({Victim::packet(first, bytes(1024, 0x11)), Victim::packet(last, bytes(1024, 0x22))});
    auto c = v.counters();
    EXPECT_EQ(c.resp_len_errors, 1u);
    EXPECT_EQ(c.resp_qp_errors, 1u);
    EXPECT_EQ(naks(v.answers()),
              (std::vector<std::pair<AckType, uint8_t>>{{AckType::nak, uint8_t(NakCode::invalid_request)}}));
    // The first packet landed (it was within the grant); nothing of the second.
    EXPECT_EQ(v.all.mem->data()[Victim::kRegion - 1100], 0x11);
    EXPECT_EQ(v.all.mem->data()[Victim::kRegion - 77], 0x11);
    EXPECT_EQ(v.all.mem->data()[Victim::kRegion - 76], v.all.snapshot[Victim::kRegion - 76]);
  }
  // A WRITE_ONLY whose payload is longer than its RETH length.
  const auto c = attack_alone(
      [](Victim& v) {
        return Victim::packet(write_only(v.qp->qpn(), v.epsn, v.all.addr() + Victim::kRegion - 8, v.all.rkey(), 8),
                              bytes(512, 0x33));
      },
      NakCode::invalid_request, "WRITE longer than its RETH");
  EXPECT_EQ(c.resp_len_errors, 1u);
}

TEST(Hostile, SendLongerThanTheReceiveBufferIsRefused) {
  Victim v;
  // The only receive is 4096 bytes at the end of its region; send 4096 + 1024.
  wire::Headers first = bth(uint8_t(Opcode::rc_send_first), v.qp->qpn(), v.epsn, false);
  std::vector<std::vector<uint8_t>> pkts;
  pkts.push_back(Victim::packet(first, bytes(1024, 0x44)));
  for (uint32_t i = 1; i < 4; ++i)
    pkts.push_back(
        Victim::packet(bth(uint8_t(Opcode::rc_send_middle), v.qp->qpn(), v.epsn + i, false), bytes(1024, 0x44)));
  pkts.push_back(
      Victim::packet(bth(uint8_t(Opcode::rc_send_middle), v.qp->qpn(), v.epsn + 4, false), bytes(1024, 0x45)));
  pkts.push_back(Victim::packet(bth(uint8_t(Opcode::rc_send_last), v.qp->qpn(), v.epsn + 5), bytes(1024, 0x46)));
  v.send(pkts);
  EXPECT_EQ(v.counters().resp_len_errors, 1u);
  Wc wc[4];
  auto n = v.cq->poll(wc);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1);
  EXPECT_EQ(wc[0].status, WcStatus::loc_len_err);
  // (The first 4096 bytes landed in the receive buffer; nothing after it.)
  v.resnapshot();
  v.expect_untouched("SEND too long");
}

TEST(Hostile, MissingAccessRightsAreRefused) {
  const std::vector<std::pair<const char*, Attack>> attacks = {
      {"write read-only",
       [](Victim& v) {
         return Victim::packet(write_only(v.qp->qpn(), v.epsn, v.read_only.addr(), v.read_only.rkey(), 64), bytes(64));
       }},
      {"atomic read-only",
       [](Victim& v) {
         return Victim::packet(fetch_add(v.qp->qpn(), v.epsn, v.read_only.addr(), v.read_only.rkey(), 1), {});
       }},
      {"read write-only",
       [](Victim& v) {
         return Victim::packet(read_req(v.qp->qpn(), v.epsn, v.write_only.addr(), v.write_only.rkey(), 64), {});
       }},
      {"atomic write-only",
       [](Victim& v) {
         return Victim::packet(fetch_add(v.qp->qpn(), v.epsn, v.write_only.addr(), v.write_only.rkey(), 1), {});
       }},
  };
  transport::Counters sum;
  for (const auto& [what, make] : attacks) sum += attack_alone(make, NakCode::remote_access_error, what);
  // The QP grants nothing, whatever the region would.
  const std::vector<std::pair<const char*, Attack>> none = {
      {"write, QP without rights",
       [](Victim& v) {
         return Victim::packet(write_only(v.qp_none->qpn(), v.epsn_none, v.all.addr(), v.all.rkey(), 64), bytes(64));
       }},
      {"read, QP without rights",
       [](Victim& v) {
         return Victim::packet(read_req(v.qp_none->qpn(), v.epsn_none, v.all.addr(), v.all.rkey(), 64), {});
       }},
      {"atomic, QP without rights",
       [](Victim& v) {
         return Victim::packet(fetch_add(v.qp_none->qpn(), v.epsn_none, v.all.addr(), v.all.rkey(), 1), {});
       }},
  };
  for (const auto& [what, make] : none) sum += attack_alone(make, NakCode::remote_access_error, what, true);
  EXPECT_EQ(sum.resp_rights_errors, 7u);
}

TEST(Hostile, RegionsOfAnotherPdAreRefused) {
  const std::vector<std::pair<const char*, Attack>> attacks = {
      {"write",
       [](Victim& v) {
         return Victim::packet(write_only(v.qp->qpn(), v.epsn, v.other_pd.addr(), v.other_pd.rkey(), 64), bytes(64));
       }},
      {"read",
       [](Victim& v) {
         return Victim::packet(read_req(v.qp->qpn(), v.epsn, v.other_pd.addr(), v.other_pd.rkey(), 64), {});
       }},
      {"atomic",
       [](Victim& v) {
         return Victim::packet(fetch_add(v.qp->qpn(), v.epsn, v.other_pd.addr(), v.other_pd.rkey(), 1), {});
       }},
  };
  transport::Counters sum;
  for (const auto& [what, make] : attacks) sum += attack_alone(make, NakCode::remote_access_error, what);
  EXPECT_EQ(sum.resp_pd_errors, 3u);
}

TEST(Hostile, ReadsAndAtomicsBeyondTheResponderLimitAreRefused) {
  Victim v;
  // max_dest_rd_atomic is 4: eight READs arriving together, before any
  // response left, find the responder's resources taken after four.
  std::vector<std::vector<uint8_t>> pkts;
  for (uint32_t i = 0; i < 8; ++i)
    pkts.push_back(Victim::packet(read_req(v.qp->qpn(), v.epsn + i, v.all.addr(), v.all.rkey(), 64), {}));
  v.send(pkts);
  const auto c = v.counters();
  EXPECT_GE(c.resp_rd_atomic_limit, 1u);
  EXPECT_GE(c.resp_inv_req_naks_sent, 1u);
  v.expect_untouched("READ limit");
}

TEST(Hostile, OutOfSequenceOpcodesAreRefused) {
  // A MIDDLE with no FIRST before it, a LAST alone.
  transport::Counters sum;
  sum += attack_alone(
      [](Victim& v) {
        return Victim::packet(bth(uint8_t(Opcode::rc_write_middle), v.qp->qpn(), v.epsn, false), bytes(1024));
      },
      NakCode::invalid_request, "MIDDLE without FIRST");
  sum += attack_alone(
      [](Victim& v) { return Victim::packet(bth(uint8_t(Opcode::rc_send_last), v.qp->qpn(), v.epsn), bytes(10)); },
      NakCode::invalid_request, "LAST alone");
  EXPECT_EQ(sum.resp_opcode_seq_errors, 2u);
}

}  // namespace
}  // namespace uroce::test

namespace uroce::test {
namespace {

// The requester side: responses that are not due (forged or stale) change
// nothing; only the real one completes the READ.
TEST(Hostile, ForgedAndStaleResponsesAreIgnored) {
  Victim v;
  namespace m = qp_attr_mask;
  QpAttr a;
  a.qp_state = QpState::rts;
  a.sq_psn = 0x5000;
  a.timeout = 18;  // 1 s: no retransmission during the test
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  ASSERT_TRUE(
      v.qp->modify(a, m::kState | m::kSqPsn | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic).ok());
  // READ 64 bytes of the "peer" into the first 64 bytes of `all`.
  Sge sge{v.all.addr(), 64, v.all.mr->lkey()};
  SendWr wr;
  wr.wr_id = 77;
  wr.opcode = WrOpcode::rdma_read;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&sge, 1};
  wr.remote_addr = 0x1000;
  wr.rkey = 0x1234;
  size_t bad;
  ASSERT_TRUE(v.qp->post_send({&wr, 1}, &bad).ok());
  auto reqs = v.answers();
  ASSERT_EQ(reqs.size(), 1u);
  ASSERT_EQ(reqs[0].bth.opcode, uint8_t(Opcode::rc_read_request));
  const uint32_t psn = reqs[0].bth.psn;
  EXPECT_EQ(psn, 0x5000u);
  auto response = [&](uint32_t p) {
    wire::Headers h = bth(uint8_t(Opcode::rc_read_response_only), v.qp->qpn(), p, false);
    h.aeth.syndrome = wire::make_syndrome(AckType::ack, wire::kCreditsInvalid);
    return h;
  };
  // From a stranger; for a PSN never sent; for one long acknowledged; an
  // ACK that would acknowledge the future; a NAK from a stranger.
  v.send({Victim::packet(response(psn), bytes(64, 0x66), kForeignIp)}, /*foreign=*/true);
  wire::Headers ack = bth(uint8_t(Opcode::rc_ack), v.qp->qpn(), psn + 10, false);
  ack.aeth.syndrome = wire::make_syndrome(AckType::ack, wire::kCreditsInvalid);
  v.send({Victim::packet(response(psn + 1), bytes(64, 0x67)), Victim::packet(response(psn - 1), bytes(64, 0x68)),
          Victim::packet(response(psn - 100000), bytes(64, 0x69)), Victim::packet(ack, {})});
  wire::Headers nak = bth(uint8_t(Opcode::rc_ack), v.qp->qpn(), psn, false);
  nak.aeth.syndrome = wire::make_syndrome(AckType::nak, uint8_t(NakCode::remote_access_error));
  v.send({Victim::packet(nak, {}, kForeignIp)}, /*foreign=*/true);
  auto c = v.counters();
  EXPECT_EQ(c.rx_foreign_source, 2u);
  EXPECT_EQ(c.req_stale_responses, 4u);
  v.expect_untouched("forged responses");
  Wc wc[2];
  EXPECT_EQ(*v.cq->poll(wc), 0) << "a forged response completed the READ";
  EXPECT_EQ(v.qp->state(), QpState::rts);
  // The real response lands and completes it.
  v.send1(Victim::packet(response(psn), bytes(64, 0x5a)));
  auto n = v.cq->poll(wc);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 1);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].wr_id, 77u);
  EXPECT_EQ(v.all.mem->data()[0], 0x5a);
  EXPECT_EQ(v.all.mem->data()[63], 0x5a);
  EXPECT_EQ(v.all.mem->data()[64], v.all.snapshot[64]);
}

}  // namespace
}  // namespace uroce::test
