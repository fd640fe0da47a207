// The copy gate (transport/copy_gate.hpp): a one-copy request still in the
// responder's ring when the requester lets the memory it names go -- the
// work request flushed, the region deregistered -- is never carried out:
// no byte lands in, or is read from, memory that is the application's
// again.  A request of another QP caught by the same fence goes again as
// packets, and later ones by copy.  (copy_gate_test.cpp checks the gate's
// wait for a copy in progress on its own.)
#include <deque>
#include <mutex>

#include "copy_fixture.hpp"

namespace uroce::test::copy {
namespace {

// B's one-copy requests (UROCE_COPY_WRITE, UROCE_COPY_READ), held back from
// its NIC while `hold`; once released, handed over first, in order.
struct Held {
  std::mutex mu;
  bool hold = true;
  std::deque<std::pair<std::vector<uint8_t>, net::RxPacket>> pkts;
  size_t taken = 0;  // held so far

  size_t count() {
    std::lock_guard g(mu);
    return taken;
  }
  void release() {
    std::lock_guard g(mu);
    hold = false;
  }
};

class HoldIo final : public ForwardingIo {
 public:
  HoldIo(std::unique_ptr<net::PacketIo> inner, std::shared_ptr<Held> h) : ForwardingIo(std::move(inner)), h_(h) {}
  size_t recv_batch(std::span<net::RxPacket> out) noexcept override {
    std::lock_guard g(h_->mu);
    bufs_.clear();  // (what the last call handed out is done with)
    if (!h_->hold && !h_->pkts.empty()) {
      size_t n = 0;
      for (; n < out.size() && !h_->pkts.empty(); ++n) {
        bufs_.push_back(std::move(h_->pkts.front().first));
        out[n] = h_->pkts.front().second;
        out[n].data = bufs_.back();
        h_->pkts.pop_front();
      }
      return n;
    }
    const size_t m = inner_->recv_batch(out);
    if (!h_->hold) return m;
    size_t k = 0;
    for (size_t i = 0; i < m; ++i) {
      const uint8_t op = out[i].data.empty() ? 0 : out[i].data[0];
      if (op == uint8_t(wire::Opcode::uroce_copy_write) || op == uint8_t(wire::Opcode::uroce_copy_read)) {
        h_->pkts.emplace_back(std::vector<uint8_t>(out[i].data.begin(), out[i].data.end()), out[i]);
        ++h_->taken;
        continue;
      }
      out[k++] = out[i];
    }
    return k;
  }

 private:
  std::shared_ptr<Held> h_;
  std::deque<std::vector<uint8_t>> bufs_;
};

PairOptions holding(std::shared_ptr<Held> held) {
  PairOptions o = copy_options();
  o.wrap_b = [held](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    return std::make_unique<HoldIo>(std::move(io), held);
  };
  return o;
}

// Until `pred`, with B's NIC driven (its progress thread sleeps: nothing
// new arrives while the held requests are handed over).
bool drive_b_until(Pair& p, const std::function<bool()>& pred) {
  return wait_until([&] {
    (void)poll_n(*p.b.rcq, 1, 1);  // (an empty CQ's poll drives the NIC)
    return pred();
  });
}

void to_error(Qp& qp) {
  QpAttr at;
  at.qp_state = QpState::err;
  ASSERT_TRUE(qp.modify(at, qp_attr_mask::kState).ok());
}

constexpr uint32_t kLen = 256u << 10;

// Work request 1 from A: a one-copy READ of B's buffer (pattern `seed`)
// into A's, or a WRITE of A's (pattern `seed`) into B's; the target's kLen
// bytes and guard are poisoned first.  Returns once B holds its request
// (a READ's one, a WRITE's first chunk).
void post_held(Pair& p, Held& held, WrOpcode op, uint32_t seed) {
  const bool read = op == WrOpcode::rdma_read;
  fill_pattern((read ? p.b : p.a).buf.data(), kLen, seed);
  std::memset((read ? p.a : p.b).buf.data(), kPoison, kLen + kGuard);
  sync_with(p);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(1, op, p.b, 0), {p.a.sge(0, kLen)}).ok());
  ASSERT_TRUE(drive_b_until(p, [&] { return read ? held.count() == 1 : held.count() >= 1; }));
}

// The first byte of the kLen + kGuard at `at` that is not poison (-1: none).
long first_unpoisoned(const uint8_t* at) {
  const std::vector<uint8_t> poison(kLen + kGuard, kPoison);
  return first_diff(at, poison.data(), kLen + kGuard);
}

TEST(RcCopyFence, AReadFlushedBeforeItsPushNeverLands) {
  auto held = std::make_shared<Held>();
  Pair p(holding(held));
  post_held(p, *held, WrOpcode::rdma_read, 41);
  to_error(*p.a.qp);
  const auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
  // The application has its memory back; the request reaches B only now.
  held->release();
  ASSERT_TRUE(drive_b_until(p, [&] { return p.b.counters().resp_copy_stale == 1; }));
  sync_with(p);
  EXPECT_EQ(first_unpoisoned(p.a.buf.data()), -1) << "a byte landed after the flush";
  EXPECT_EQ(p.b.counters().resp_copy_reads, 0u);
  EXPECT_GE(p.a.counters().req_copy_fences, 1u);
  EXPECT_EQ(p.a.counters().req_copy_fence_timeouts, 0u);
}

TEST(RcCopyFence, AWriteFlushedBeforeItsPullIsNotCarriedOut) {
  auto held = std::make_shared<Held>();
  Pair p(holding(held));
  post_held(p, *held, WrOpcode::rdma_write, 42);
  to_error(*p.a.qp);
  const auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
  // The source may now hold anything: B must not read it.
  std::memset(p.a.buf.data(), 0x11, kLen);
  held->release();
  ASSERT_TRUE(drive_b_until(p, [&] { return p.b.counters().resp_copy_stale == 1; }));
  sync_with(p);
  EXPECT_EQ(first_unpoisoned(p.b.buf.data()), -1) << "a byte was pulled after the flush";
  EXPECT_EQ(p.b.counters().resp_copy_writes, 0u);
  EXPECT_EQ(p.b.counters().resp_copy_bytes, 0u);
}

// The READ's own sink deregistered while its request waits: the request is
// stale, the READ is asked for again as packets, and those find no region
// (LOC_PROT_ERR, as without the copy); the memory stays untouched.
TEST(RcCopyFence, AReadWhoseSinkWasDeregisteredNeverLands) {
  auto held = std::make_shared<Held>();
  Pair p(holding(held));
  fill_pattern(p.b.buf.data(), kLen, 43);
  std::vector<uint8_t> sink(kLen + kGuard, kPoison);
  auto mr = reg_mr(*p.a.pd, sink.data(), sink.size(), access::kLocalWrite);
  ASSERT_TRUE(mr);
  sync_with(p);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(1, WrOpcode::rdma_read, p.b, 0),
                         {Sge{uint64_t(uintptr_t(sink.data())), kLen, mr->lkey()}})
                  .ok());
  ASSERT_TRUE(drive_b_until(p, [&] { return held->count() == 1; }));
  mr.reset();
  held->release();
  const auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::loc_prot_err);
  sync_with(p);
  EXPECT_EQ(first_unpoisoned(sink.data()), -1) << "a byte landed after deregistration";
  EXPECT_EQ(p.b.counters().resp_copy_stale, 1u);
  EXPECT_EQ(p.b.counters().resp_copy_reads, 0u);
}

// A later work request failing on our side (a bad key) sends the QP to
// ERR with a fence: an earlier WRITE whose request still waits at the peer
// is then never carried out, and says so (WR_FLUSH_ERR, not success).
TEST(RcCopyFence, AWriteCaughtBehindALaterFailureIsNotReportedDone) {
  auto held = std::make_shared<Held>();
  Pair p(holding(held));
  post_held(p, *held, WrOpcode::rdma_write, 46);
  Sge bad = p.a.sge(0, 64);
  bad.lkey ^= 0x5a5a00;  // names no region
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(2, WrOpcode::rdma_write, p.b, 0), {bad}).ok());
  const auto wc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, WcStatus::loc_prot_err);
  held->release();
  ASSERT_TRUE(drive_b_until(p, [&] { return p.b.counters().resp_copy_stale >= 1; }));
  sync_with(p);
  EXPECT_EQ(first_unpoisoned(p.b.buf.data()), -1);
  EXPECT_EQ(p.b.counters().resp_copy_writes, 0u);
}

// A fence for memory the request does not name still makes it stale: it
// goes again as packets, the bytes arrive, and the QP keeps copying.
TEST(RcCopyFence, ARequestCaughtByAnotherFenceGoesAgainAsPackets) {
  auto held = std::make_shared<Held>();
  Pair p(holding(held));
  fill_pattern(p.b.buf.data(), kLen, 44);
  std::memset(p.a.buf.data(), kPoison, kLen + kGuard);
  std::vector<uint8_t> other(4096);
  auto unrelated = reg_mr(*p.a.pd, other.data(), other.size(), access::kLocalWrite);
  ASSERT_TRUE(unrelated);
  sync_with(p);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(1, WrOpcode::rdma_read, p.b, 0), {p.a.sge(0, kLen)}).ok());
  ASSERT_TRUE(drive_b_until(p, [&] { return held->count() == 1; }));
  unrelated.reset();
  held->release();
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), kLen), -1);
  EXPECT_EQ(p.a.buf[kLen], kPoison);
  Counters a = p.a.counters(), b = p.b.counters();
  EXPECT_EQ(b.resp_copy_stale, 1u);
  EXPECT_EQ(b.resp_copy_reads, 0u);
  EXPECT_EQ(a.req_copy_naks_rcvd, 1u);
  // The next READ is a copy again.
  fill_pattern(p.b.buf.data() + kLen, kLen, 45);
  sync_with(p);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(2, WrOpcode::rdma_read, p.b, kLen), {p.a.sge(kLen, kLen)}).ok());
  wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.a.buf.data() + kLen, p.b.buf.data() + kLen, kLen), -1);
  EXPECT_EQ(p.b.counters().resp_copy_reads, 1u);
}

}  // namespace
}  // namespace uroce::test::copy
