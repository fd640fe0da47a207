// Atomics under contention: four QPs, each driven by its own thread, issue
// 500 FETCH_AND_ADD(+1) each on one counter.  The counter ends at exactly
// 2000 and the original values returned are exactly {0..1999}, once each,
// also when every packet on the wire is duplicated.
#include <algorithm>
#include <atomic>
#include <thread>

#include "loopback.hpp"

namespace uroce::test {
namespace {

constexpr int kThreads = 4;
constexpr int kOps = 500;

struct Lane {
  std::unique_ptr<Cq> cq_a, cq_b;
  std::unique_ptr<Qp> qa, qb;
};

void hammer(Pair& p) {
  auto* counter = reinterpret_cast<uint64_t*>(p.b.buf.data() + 4096);
  *counter = 0;
  std::vector<Lane> lanes(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    Lane& l = lanes[t];
    l.cq_a = std::move(*Cq::create(*p.a.ctx, 64, nullptr));
    l.cq_b = std::move(*Cq::create(*p.b.ctx, 64, nullptr));
    l.qa = p.create_qp(p.a, l.cq_a.get(), l.cq_a.get());
    l.qb = p.create_qp(p.b, l.cq_b.get(), l.cq_b.get());
    ASSERT_TRUE(l.qa && l.qb);
    const uint32_t psn = 0xfff000 + t * 0x100;  // lanes 2 and 3 cross the PSN wrap
    p.connect_qp(*l.qa, *l.qb, p.b, psn + 1, psn);
    p.connect_qp(*l.qb, *l.qa, p.a, psn, psn + 1);
  }
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Lane& l = lanes[t];
      int posted = 0, done = 0;
      Wc wc[16];
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done < kOps && std::chrono::steady_clock::now() < deadline) {
        while (posted < kOps && posted - done < 16) {
          Sge s = p.a.sge(size_t(t * kOps + posted) * 8, 8);
          SendWr wr;
          wr.wr_id = uint64_t(t) << 32 | uint64_t(posted);
          wr.opcode = WrOpcode::atomic_fetch_and_add;
          wr.send_flags = send_flags::kSignaled;
          wr.sg_list = {&s, 1};
          wr.remote_addr = p.b.addr(4096);
          wr.rkey = p.b.mr->rkey();
          wr.compare_add = 1;
          if (!post_send(*l.qa, wr).ok()) {
            ++errors;
            return;
          }
          ++posted;
        }
        auto r = l.cq_a->poll(wc);
        if (!r.ok()) {
          ++errors;
          return;
        }
        for (int i = 0; i < *r; ++i) {
          if (wc[i].status != WcStatus::success || wc[i].opcode != WcOpcode::fetch_add || wc[i].byte_len != 8 ||
              wc[i].wr_id != (uint64_t(t) << 32 | uint64_t(done)))
            ++errors;
          ++done;
        }
      }
      if (done != kOps) ++errors;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(*counter, uint64_t(kThreads * kOps));
  std::vector<uint64_t> orig(kThreads * kOps);
  std::memcpy(orig.data(), p.a.buf.data(), orig.size() * 8);
  std::sort(orig.begin(), orig.end());
  for (size_t i = 0; i < orig.size(); ++i) ASSERT_EQ(orig[i], i) << "original values are not {0..1999}";
  // Within each lane the values it got back increase (its atomics executed in order).
  for (int t = 0; t < kThreads; ++t) {
    const auto* v = reinterpret_cast<const uint64_t*>(p.a.buf.data()) + t * kOps;
    EXPECT_TRUE(std::is_sorted(v, v + kOps)) << "lane " << t;
  }
  for (auto& l : lanes) {
    l.qa.reset();
    l.qb.reset();
  }
}

TEST(RcAtomicHammer, FourQpsFourThreads) {
  Pair p;
  hammer(p);
  // On loopback a duplicate atomic comes only from a retransmission (a
  // retry timeout when the machine stalls the peer): never more of them
  // than the requester resent, and each answered without executing again
  // (hammer() checked that every value was returned exactly once).
  EXPECT_LE(p.b.counters().resp_dup_atomics, p.a.counters().req_retransmits);
}

TEST(RcAtomicHammer, EveryPacketDuplicated) {
  PairOptions o;
  o.fake = net::FakeNetwork::create();
  o.wrap = dup_wrap();
  Pair p(o);
  hammer(p);
  // Every request arrived twice; the copies were answered from the replay
  // cache, never applied.
  EXPECT_EQ(p.b.counters().resp_dup_atomics, uint64_t(kThreads * kOps));
  EXPECT_GE(p.a.counters().req_stale_responses, uint64_t(kThreads * kOps));
}

}  // namespace
}  // namespace uroce::test
