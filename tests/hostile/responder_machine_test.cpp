// The responder's protocol machines (transport/engine_state.hpp: RespMsg,
// RecvSlot, AckOwed, SeqNak) driven by hand-built packets, each step checked
// in the engine's snapshot, on the wire and in the completion queue.
#include "hostile.hpp"
#include "transport/qp_engine.hpp"

namespace uroce::test {
namespace {

using transport::AckOwed;
using transport::EngineSnapshot;
using transport::RecvSlot;
using transport::RespMsg;
using transport::SeqNak;
using wire::AckType;
using wire::NakCode;
using wire::Opcode;

std::vector<uint8_t> bytes(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

EngineSnapshot snap(Victim&, const Qp& qp) { return qp.debug_snapshot(); }

wire::Headers send_pkt(Opcode op, uint32_t qpn, uint32_t psn, bool ack_req = true) {
  return bth(uint8_t(op), qpn, psn, ack_req);
}

std::vector<Wc> poll_all(Cq& cq) {
  std::vector<Wc> out(16);
  const auto n = cq.poll(out);
  out.resize(n.ok() ? size_t(*n) : 0);
  return out;
}

// (type, value, psn) of every ACK/NAK the victim sent.
struct Answer {
  AckType type;
  uint8_t value;
  uint32_t psn;
  bool operator==(const Answer&) const = default;
};
std::vector<Answer> acks(Victim& v) {
  std::vector<Answer> out;
  for (const auto& h : v.answers())
    if (h.bth.opcode == uint8_t(Opcode::rc_ack))
      out.push_back({wire::aeth_type(h.aeth.syndrome), wire::aeth_value(h.aeth.syndrome), h.bth.psn});
  return out;
}

TEST(ResponderMachine, NameTablesCoverEveryValue) {
  EXPECT_STREQ(to_string(RespMsg::uc_drop), "uc_drop");
  EXPECT_STREQ(to_string(RecvSlot::srq), "srq");
  EXPECT_STREQ(to_string(AckOwed::seq_nak), "seq_nak");
  EXPECT_STREQ(to_string(SeqNak::sent), "sent");
  EXPECT_STREQ(to_string(transport::SqDrain::drained), "drained");
  EXPECT_STREQ(to_string(transport::Recovery::after_cut), "after_cut");
  EXPECT_STREQ(to_string(RespMsg(4)), "?");
  EXPECT_STREQ(machine_name(transport::RnrGate::open), "RnrGate");
  EXPECT_EQ(std::size(transport::kAckOwedNames), 4u);
}

// A two-packet SEND into the WQE the Victim posted: the message and the WQE it fills, then both released
// at the LAST packet, which completes the receive and is acknowledged.
TEST(ResponderMachine, SendFillsAWqeThenReleasesIt) {
  Victim v;
  const uint32_t q = v.qp->qpn();
  v.send1(Victim::packet(send_pkt(Opcode::rc_send_first, q, v.epsn++, false), bytes(1024, 1)));
  EngineSnapshot s = snap(v, *v.qp);
  EXPECT_EQ(s.msg, RespMsg::send) << to_string(s);
  EXPECT_EQ(s.slot, RecvSlot::rq) << to_string(s);
  EXPECT_EQ(s.rq_size, 0u);
  EXPECT_TRUE(poll_all(*v.cq).empty());
  v.send1(Victim::packet(send_pkt(Opcode::rc_send_last, q, v.epsn++), bytes(10, 2)));
  // The ACK of a message that consumed a receive waits for a reply to ride
  // on, at most a progress tick; a loaded machine may run that tick late.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((s = snap(v, *v.qp)).ack != AckOwed::none && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(s.msg, RespMsg::idle) << to_string(s);
  EXPECT_EQ(s.slot, RecvSlot::empty) << to_string(s);
  EXPECT_EQ(s.ack, AckOwed::none) << "the ACK is still owed: " << to_string(s);
  auto wc = poll_all(*v.cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[0].wr_id, 42u);
  EXPECT_EQ(wc[0].byte_len, 1034u);
  EXPECT_EQ(acks(v), (std::vector<Answer>{{AckType::ack, wire::kCreditsInvalid, v.epsn - 1}}));
}

// No receive WQE (qp_none has none posted): an RNR NAK, and the message
// does not count as begun.
TEST(ResponderMachine, SendWithoutAWqeIsRnrNakedAndLeavesNoState) {
  Victim v;
  const uint32_t q = v.qp_none->qpn();
  v.send1(Victim::packet(send_pkt(Opcode::rc_send_first, q, v.epsn_none), bytes(1024, 1)));
  const EngineSnapshot s = snap(v, *v.qp_none);
  EXPECT_EQ(s.msg, RespMsg::idle) << to_string(s);
  EXPECT_EQ(s.slot, RecvSlot::empty) << to_string(s);
  EXPECT_EQ(s.ack, AckOwed::none) << to_string(s);
  EXPECT_EQ(s.epsn, v.epsn_none);
  const auto a = acks(v);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].type, AckType::rnr_nak);
  EXPECT_EQ(a[0].psn, v.epsn_none);
  EXPECT_TRUE(poll_all(*v.cq).empty());
}

// A gap draws one sequence NAK for the expected PSN; later packets of the
// same pass draw none and are kept (selective repeat).  The expected packet
// clears it; a gap left behind kept packets is NAKed at once; filling it
// executes the kept packets, in order, and one ACK covers them.
TEST(ResponderMachine, OneSequenceNakPerGap) {
  Victim v;
  const uint32_t q = v.qp->qpn();
  auto write = [&](uint32_t psn, bool ack_req) {
    wire::Headers h = write_only(q, psn, v.all.addr() + 64 * (psn - kRqPsn), v.all.rkey(), 64);
    h.bth.ack_req = ack_req;
    return Victim::packet(h, bytes(64, uint8_t(psn)));
  };
  v.send1(write(v.epsn + 2, false));
  EngineSnapshot s = snap(v, *v.qp);
  EXPECT_EQ(s.seq, SeqNak::sent) << to_string(s);
  EXPECT_EQ(acks(v), (std::vector<Answer>{{AckType::nak, uint8_t(NakCode::psn_sequence_error), v.epsn}}));
  v.send1(write(v.epsn + 3, false));
  EXPECT_TRUE(acks(v).empty()) << "a second NAK for the same gap";
  EXPECT_EQ(snap(v, *v.qp).seq, SeqNak::sent);
  EXPECT_EQ(v.counters().resp_ooo_kept, 2u);
  v.send1(write(v.epsn, true));
  s = snap(v, *v.qp);
  EXPECT_EQ(s.epsn, v.epsn + 1);
  EXPECT_EQ(s.seq, SeqNak::sent) << to_string(s);
  EXPECT_EQ(acks(v), (std::vector<Answer>{{AckType::nak, uint8_t(NakCode::psn_sequence_error), v.epsn + 1}}));
  v.send1(write(v.epsn + 1, true));
  s = snap(v, *v.qp);
  EXPECT_EQ(s.seq, SeqNak::clear) << to_string(s);
  EXPECT_EQ(s.epsn, v.epsn + 4);
  EXPECT_EQ(acks(v), (std::vector<Answer>{{AckType::ack, wire::kCreditsInvalid, v.epsn + 3}}));
  EXPECT_EQ(v.counters().resp_ooo_executed, 2u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(v.all.mem->data()[64 * i], uint8_t(v.epsn + i)) << i;
  v.epsn += 4;
  v.resnapshot();
}

// A WRITE in progress is the message; a SEND_MIDDLE while idle is an
// opcode-sequence error (NAK invalid request) and leaves the machine idle.
// A packet out of the opcode sequence is an invalid request (IBA class C):
// NAKed, and the QP enters ERR, its posted receive flushed.
TEST(ResponderMachine, OutOfSequenceOpcodeEndsTheConnection) {
  Victim v;
  const uint32_t q = v.qp->qpn();
  v.send1(Victim::packet(send_pkt(Opcode::rc_send_middle, q, v.epsn), bytes(1024, 1)));
  EXPECT_EQ(acks(v), (std::vector<Answer>{{AckType::nak, uint8_t(NakCode::invalid_request), v.epsn}}));
  EngineSnapshot s = snap(v, *v.qp);
  EXPECT_EQ(s.msg, RespMsg::idle) << to_string(s);
  EXPECT_EQ(s.state, QpState::err) << to_string(s);
  auto wc = poll_all(*v.cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 42u);
  EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
  EXPECT_EQ(v.counters().resp_qp_errors, 1u);
  v.expect_untouched("opcode sequence");
}

TEST(ResponderMachine, WriteInProgress) {
  Victim v;
  const uint32_t q = v.qp->qpn();
  wire::Headers first = bth(uint8_t(Opcode::rc_write_first), q, v.epsn, false);
  first.reth = {v.all.addr(), v.all.rkey(), 2048};
  v.send1(Victim::packet(first, bytes(1024, 7)));
  EngineSnapshot s = snap(v, *v.qp);
  EXPECT_EQ(s.msg, RespMsg::write) << to_string(s);
  EXPECT_EQ(s.slot, RecvSlot::empty) << to_string(s);
  v.send1(Victim::packet(bth(uint8_t(Opcode::rc_write_last), q, v.epsn + 1), bytes(1024, 8)));
  s = snap(v, *v.qp);
  EXPECT_EQ(s.msg, RespMsg::idle) << to_string(s);
  EXPECT_EQ(v.all.mem->data()[1023], 7);
  EXPECT_EQ(v.all.mem->data()[2047], 8);
  v.resnapshot();
}

// A WRITE with immediate takes its receive WQE before its data lands; when
// the data cannot land (the region went away mid-message) the responder
// answers as rxe does (IBA class C): the WQE completes with REM_ACCESS_ERR,
// the requester gets the NAK, and the QP enters ERR.
TEST(ResponderMachine, WqeOfAFailedWriteWithImmediateCompletesInError) {
  Victim v;
  const uint32_t q = v.qp->qpn();
  wire::Headers first = bth(uint8_t(Opcode::rc_write_first), q, v.epsn, false);
  first.reth = {v.all.addr(), v.all.rkey(), 2048};
  v.send1(Victim::packet(first, bytes(1024, 7)));
  v.all.mr.reset();  // deregistered in the middle of the message
  wire::Headers last = bth(uint8_t(Opcode::rc_write_last_imm), q, v.epsn + 1);
  last.imm = 0x1234;
  v.send1(Victim::packet(last, bytes(1024, 8)));
  EXPECT_EQ(acks(v), (std::vector<Answer>{{AckType::nak, uint8_t(NakCode::remote_access_error), v.epsn + 1}}));
  EngineSnapshot s = snap(v, *v.qp);
  EXPECT_EQ(s.msg, RespMsg::idle) << to_string(s);
  EXPECT_EQ(s.slot, RecvSlot::empty) << to_string(s);
  EXPECT_EQ(s.state, QpState::err) << to_string(s);
  auto wc = poll_all(*v.cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::rem_access_err);
  EXPECT_EQ(wc[0].wr_id, 42u);
  // Nothing after it is served.
  v.send1(Victim::packet(send_pkt(Opcode::rc_send_only, q, v.epsn + 1), bytes(100, 9)));
  EXPECT_TRUE(poll_all(*v.cq).empty());
  EXPECT_EQ(v.counters().rx_bad_state, 1u);
  v.recv.snapshot.assign(v.recv.mem->data(), v.recv.mem->data() + Victim::kRegion);
  EXPECT_NE(v.recv.mem->data()[Victim::kRegion - 4096 + 99], 9);
}

}  // namespace
}  // namespace uroce::test
