// Events against destruction in the C++ API: an async event never names an
// object other than its own, a CompletionQueue's destructor waits for the
// acknowledgement of the events taken for it, and a timed take ends on time
// while other threads take the events.
#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "api_pair.hpp"

namespace uroce::apitest {
namespace {

// Stops and joins a helper thread however the test ends (a failed ASSERT
// or a throwing must() would otherwise leave it joinable: terminate).
struct StopAndJoin {
  std::atomic<bool>& stop;
  std::thread& t;
  ~StopAndJoin() {
    stop.store(true);
    if (t.joinable()) t.join();
  }
};

// One context with a PD, a CQ and an SRQ; QPs on the SRQ raise
// qp_last_wqe_reached when moved to ERR.
struct SrqHost {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  ProtectionDomain pd = must(ctx.alloc_pd(), "alloc_pd");
  CompletionQueue cq = must(ctx.create_cq(64), "create_cq");
  SharedReceiveQueue srq = must(pd.create_srq(SrqConfig{16, 1, 0}), "create_srq");

  QueuePair make_qp() {
    QpConfig c;
    c.send_cq = c.recv_cq = &cq;
    c.srq = &srq;
    c.cap = QpCap{4, 0, 1, 0, 0};
    return must(pd.create_qp(c), "create_qp");
  }
  static void to_error(QueuePair& qp) {
    QpAttr a;
    a.qp_state = QpState::err;
    must(qp.modify(a, qp_attr_mask::kState), "modify to ERR");
  }
};

// Each round moves a QP to ERR and destroys it, then makes a bystander QP
// that is never in error, likely where the destroyed one was.  Even rounds
// destroy 0-40 us after the move (racing the taker), odd ones once the
// event was taken.  An event handed out names its own QP; one naming a
// bystander, or a destroyed QP's number with no QP, is stray.
TEST(EventLifetime, AsyncEventsNeverNameAnotherQp) {
  SrqHost h;
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint32_t> errored, bystanders, named;
  int stray = 0;
  std::atomic<bool> stop{false};
  std::thread taker([&] {
    while (!stop.load()) {
      auto ev = h.ctx.get_async_event(5);
      if (!ev.ok() || ev->type != AsyncEventType::qp_last_wqe_reached) continue;
      std::lock_guard g(mu);
      if (ev->qp && errored.count(ev->qp_num) && !bystanders.count(ev->qp_num))
        named.insert(ev->qp_num);
      else
        ++stray;
      cv.notify_all();
    }
  });
  StopAndJoin joiner{stop, taker};
  std::optional<QueuePair> bystander;
  constexpr int kRounds = 300;
  for (int i = 0; i < kRounds; ++i) {
    bystander.reset();
    {
      QueuePair qp = h.make_qp();
      const uint32_t qpn = qp.qpn();
      {
        std::lock_guard g(mu);
        errored.insert(qpn);
      }
      SrqHost::to_error(qp);
      if (i % 2 == 0) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(i / 2 % 41);
        while (std::chrono::steady_clock::now() < until) {
        }
      } else {
        std::unique_lock l(mu);
        if (!cv.wait_for(l, std::chrono::seconds(10), [&] { return named.count(qpn) > 0; })) {
          ADD_FAILURE() << "round " << i << ": the event of QP " << qpn << " never came";
          break;
        }
      }
    }  // destroyed
    QueuePair b = h.make_qp();
    {
      std::lock_guard g(mu);
      bystanders.insert(b.qpn());
    }
    bystander.emplace(std::move(b));
  }
  stop.store(true);
  taker.join();
  std::lock_guard g(mu);
  EXPECT_EQ(stray, 0);
  EXPECT_GE(named.size(), size_t(kRounds / 2));
  for (uint32_t q : bystanders) EXPECT_FALSE(errored.count(q)) << "QP number " << q << " reused";
}

// A CQ on a channel with one completion event queued: its QP flushed a
// receive into it (moved to ERR with the CQ armed).
struct FlushedCq {
  Context ctx = must(Context::open(local_device("127.0.0.1")), "open");
  ProtectionDomain pd = must(ctx.alloc_pd(), "alloc_pd");
  CompletionChannel ch = must(ctx.create_comp_channel(), "create_comp_channel");
  std::optional<CompletionQueue> cq{must(ctx.create_cq(4, &ch), "create_cq")};
  std::vector<std::byte> buf = std::vector<std::byte>(64);
  MemoryRegion mr = must(pd.reg_mr(std::span<std::byte>(buf), access::kLocalWrite), "reg_mr");
  std::optional<QueuePair> qp;

  FlushedCq() {
    QpConfig c;
    c.send_cq = c.recv_cq = &*cq;
    c.cap = QpCap{1, 1, 1, 1, 0};
    qp.emplace(must(pd.create_qp(c), "create_qp"));
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    must(qp->modify(a,
                    qp_attr_mask::kState | qp_attr_mask::kPkeyIndex | qp_attr_mask::kPort | qp_attr_mask::kAccessFlags),
         "modify to INIT");
    Sge s = mr.sge(0, 8);
    must(qp->post_recv(RecvWr{7, {&s, 1}}), "post_recv");
    must(cq->req_notify(), "req_notify");
    a.qp_state = QpState::err;
    must(qp->modify(a, qp_attr_mask::kState), "modify to ERR");
  }
};

// A thread that took a completion event may use the CQ until it
// acknowledges: the CQ's destructor waits for that.
TEST(EventLifetime, CompletionQueueWaitsForTheAckOfATakenEvent) {
  FlushedCq f;
  std::promise<void> took;
  std::atomic<bool> used_after{false};
  CompletionQueue* const expected = &*f.cq;
  std::atomic<bool> stop{false};  // (the taker ends by itself)
  std::thread taker([&] {
    auto got = f.ch.get_event(5000);
    took.set_value();
    if (!got.ok()) return;
    if (*got == expected) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      Wc wc[2];
      auto n = (*got)->poll(wc);  // still ours to use
      used_after.store(n.ok() && *n == 1 && wc[0].wr_id == 7 && wc[0].status == WcStatus::wr_flush_err);
    }
    (*got)->ack_events(1);
  });
  StopAndJoin joiner{stop, taker};
  ASSERT_EQ(took.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  f.qp.reset();
  f.cq.reset();  // waits for the taker's acknowledgement
  EXPECT_TRUE(used_after.load());
  taker.join();
}

// Events not taken yet are dropped with their CQ: its destructor does not
// wait for them, and the channel does not hand them out afterwards.
TEST(EventLifetime, UntakenCompletionEventsGoWithTheirCq) {
  FlushedCq f;
  pollfd p{f.ch.fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);  // queued
  f.qp.reset();
  f.cq.reset();
  EXPECT_EQ(f.ch.get_event(0).status().code(), ETIMEDOUT);
  EXPECT_EQ(::poll(&p, 1, 0), 0);  // the fd's count went with it
}

// A timed take ends within its timeout even when other threads take the
// event that woke it.
TEST(EventLifetime, TimedAsyncTakeEndsWhenAnotherThreadTookTheEvent) {
  SrqHost h;
  std::atomic<bool> stop{false};
  std::atomic<int> rivals_took{0}, rivals_done{0};
  std::vector<std::thread> rivals;
  for (int k = 0; k < 3; ++k)
    rivals.emplace_back([&] {
      while (!stop.load())
        if (h.ctx.get_async_event(20).ok()) ++rivals_took;
      ++rivals_done;
    });
  // However the test ends: events until every taker is out (a take that
  // outwaits its timeout waits for the next event), then the joins.
  struct Release {
    SrqHost& h;
    std::atomic<bool>& stop;
    std::atomic<int>& done;
    std::vector<std::thread>& rivals;
    std::future<Result<AsyncEvent>>* timed = nullptr;
    ~Release() {
      stop.store(true);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      auto all_out = [&] {
        return done.load() == int(rivals.size()) &&
               (!timed || !timed->valid() || timed->wait_for(std::chrono::seconds(0)) == std::future_status::ready);
      };
      while (!all_out() && std::chrono::steady_clock::now() < give_up) {
        QueuePair qp = h.make_qp();
        SrqHost::to_error(qp);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      for (auto& t : rivals)
        if (t.joinable()) t.join();
    }
  };
  std::future<Result<AsyncEvent>> timed;
  Release release{h, stop, rivals_done, rivals, &timed};
  constexpr int kRounds = 30;
  int timed_took = 0, timed_out = 0;
  for (int i = 0; i < kRounds; ++i) {
    timed = std::async(std::launch::async, [&] { return h.ctx.get_async_event(50); });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // all wait
    QueuePair qp = h.make_qp();
    SrqHost::to_error(qp);
    if (timed.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      ADD_FAILURE() << "round " << i << ": a take with a 50 ms timeout still waits after 5 s";
      return;  // (release frees it)
    }
    auto r = timed.get();
    if (r.ok())
      ++timed_took;
    else if (r.status().code() == ETIMEDOUT)
      ++timed_out;
    else
      ADD_FAILURE() << r.status().to_string();
  }
  stop.store(true);
  EXPECT_EQ(timed_took + timed_out, kRounds);
  EXPECT_LE(timed_took + rivals_took.load(), kRounds);  // each round's one event, taken at most once
}

}  // namespace
}  // namespace uroce::apitest
