// Nic, the sending side: QPs with something to send take turns in pump(),
// each with a budget per call, and ACKs that may wait for the application's
// answer (responder_ack.cpp) wait on lazy_ until something leaves with them
// or their hold ends (progress.cpp's deadlines).
#include <algorithm>

#include "transport/nic.hpp"
#include "transport/path_share.hpp"
#include "transport/protocol.hpp"
#include "transport/qp_engine.hpp"

namespace uroce::transport {
namespace {

constexpr size_t kPerQpBudget = 16;

}  // namespace

void Nic::schedule(QpEngine& qp) noexcept {
  if (!qp.in_ready_) {
    qp.in_ready_ = true;
    ready_.push_back(&qp);
  }
}

void Nic::schedule_ack(QpEngine& qp) noexcept {
  // Also when qp is ready to send (its ACK of our request came in the same
  // batch, say): pump() leaves a lazy ACK to wait when there is nothing to
  // send with it.
  if (!qp.in_lazy_) {
    qp.in_lazy_ = true;
    if (lazy_.empty()) lazy_since_ = now_;  // (poll_rx refreshed it for this batch)
    lazy_.push_back(&qp);
  }
}

void Nic::pump() noexcept {
  const uint64_t sent_before = counters_.tx_packets;
  while (!ready_.empty()) {
    QpEngine* qp = ready_.front();
    ready_.pop_front();
    qp->in_ready_ = false;
    // Responses first, as hardware would have sent them: an ACK that waited
    // for the application's answer still precedes that answer on the wire,
    // so the peer completes its request before it sees our new one (a
    // program that polls one completion per event relies on that order).
    // But an answer its CQ does not see (a WRITE it spins on memory for)
    // goes before that ACK: the peer polls for the ACK, and a poll that
    // found it alone, the WRITE a moment behind, would leave the WRITE to
    // its progress thread while it spins; this way the poll that completes
    // its request has landed the WRITE first.  Only a lazy ACK, and only
    // behind one packet: the ACK of a stream is never held up, and a SEND
    // posted behind the WRITE still follows the ACK.  Where packets form
    // GSO trains, any answer's first packet goes before the ACK held for
    // it: the ACK ends that packet's train, one datagram for both, and the
    // peer takes the ACK first all the same (poll_rx).  An ACK waiting for
    // the answer (lazy) stays behind while there is nothing to send with
    // it; for an application that busy-polls its CQ, whatever else
    // scheduled the QP (the ACK of our last request, which came with what
    // this one acknowledges).  (One that waits for events answers later,
    // and its peer's request would then wait that long: qperf rc_lat over
    // UDP took 21-48 us a round trip that way against 16-20.)  Each side has its own budget:
    // neither starves the other.
    const bool plain_ack = responder_owes_plain_ack(*qp);
    const NextRequest next = requester_next(*qp);
    // (Not on a limited shared path: there the one-packet call would end
    // the QP's turn, its pass with it, before the rest of its answer.)
    const bool answer_first = plain_ack && qp->resp.ack_may_wait && (!qp->path || !qp->path->limited()) &&
                              (next == NextRequest::silent || (next == NextRequest::visible && tx_.trains()));
    if (plain_ack && qp->resp.ack_may_wait) {
      if (next != NextRequest::none)
        held_ack_leaves(*qp, HeldAck::answered);
      else if (!qp->in_lazy_)
        held_ack_leaves(*qp, HeldAck::early);
    }
    size_t budget = kPerQpBudget;
    bool more = false;
    if (plain_ack && qp->in_lazy_ && (qp->resp.ack_after_answer || qp->resp.ack_for_poller) &&
        next == NextRequest::none) {
      // (on lazy_: the answer, an idle poll or the progress thread sends it)
    } else {
      if (answer_first) {  // the answer's first packet carries the ACK owed
        // (A WRITE that fails here sends the ACK before the QP enters
        // ERR: fail_wqe.)
        size_t one = 1;
        more = requester_produce(*this, *qp, one);
        // An answer the peer's CQ does not see (a WRITE it spins on
        // memory for) keeps its ACK out of its train: the peer must land
        // the WRITE no later than it takes the ACK, and its shared-memory
        // ring would put a train's closing ACK first.
        if (next == NextRequest::silent) tx_.close_train();
      }
      more = responder_produce(*this, *qp, budget) || more;
      budget = kPerQpBudget;
      more = requester_produce(*this, *qp, budget) || more;
    }
    if (more) schedule(*qp);
    if (tx_.full()) tx_.flush(*io_, counters_);
  }
  // Lazy ACKs ride along with whatever else is leaving now.
  if (tx_.size() > 0 && !lazy_.empty()) flush_acks(HeldAck::early);
  tx_.flush(*io_, counters_);
  if (counters_.tx_packets != sent_before) last_tx_ = Clock::now();  // (a waiter's spin counts from it)
}

bool Nic::lazy_acks_await_acks() const noexcept {
  for (const QpEngine* qp : lazy_)
    if (!qp->resp.ack_after_answer || qp->req.una_psn == qp->req.next_psn) return false;
  return true;
}

bool Nic::lazy_acks_held() const noexcept {
  for (const QpEngine* qp : lazy_)
    if (!qp->resp.ack_after_answer) return false;
  return true;
}

bool Nic::lazy_acks_may_wait() const noexcept {
  for (const QpEngine* qp : lazy_)
    if (!qp->resp.ack_may_wait) return false;
  return true;
}

void Nic::held_ack_leaves(QpEngine& qp, HeldAck how) noexcept {
  ResponderState& s = qp.resp;
  if (!s.ack_may_wait) return;
  s.ack_after_answer = s.ack_may_wait = false;
  if (how == HeldAck::answered) s.hold_misses = 0;
  if (how != HeldAck::alone) return;
  // Alone: the next ones leave at once, 16 of them, then 32, ... 1,024
  // after misses in a row (a miss costs up to kLazyAckNs; a hold that
  // would have paid, a round trip of the progress thread's wake-ups).
  s.hold_misses = uint8_t(std::min(s.hold_misses + 1, 7));
  s.hold_skip = uint16_t(8u << s.hold_misses);
  ++counters_.resp_held_acks_alone;
}

void Nic::flush_acks(HeldAck how) noexcept {
  for (QpEngine* qp : lazy_) {
    qp->in_lazy_ = false;
    // (Only the first came when the deadline counted from: the others are
    // not late.)
    held_ack_leaves(*qp, how == HeldAck::alone && qp != lazy_.front() ? HeldAck::early : how);
    if (tx_.full()) tx_.flush(*io_, counters_);
    responder_flush_ack(*this, *qp);
  }
  lazy_.clear();
  tx_.flush(*io_, counters_);
}

}  // namespace uroce::transport
