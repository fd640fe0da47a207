// compat.Verbs: completion channels, CQ events and async events.
#include <condition_variable>
#include <mutex>

#include "verbs_fixture.hpp"

namespace compat_test {

// Stops and joins a test's helper thread on every way out of the test,
// an ASSERT's early return included.
struct StopAndJoin {
  std::atomic<bool>& stop;
  std::thread& thread;
  ~StopAndJoin() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
};

// ------------------------------------------------------------------ events

TEST_F(Verbs, CompletionChannelEvents) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c = cq(64, ch);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  connect(a, a->qp_num);
  ASSERT_EQ(ibv_req_notify_cq(c, 0), 0);
  ibv_sge s = sge(0, 8);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr(4096);
  wr.wr.rdma.rkey = mr_->rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, c);
  EXPECT_EQ(ev_ctx, this);
  EXPECT_EQ(poll(c, 1).size(), 1u);
  ibv_ack_cq_events(c, 1);
  // The fd is a real one: non-blocking, with nothing queued, says EAGAIN.
  pollfd pfd{ch->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // the CQ uses it
  ASSERT_EQ(ibv_destroy_qp(a), 0);
  qps_.clear();
  ASSERT_EQ(ibv_destroy_cq(c), 0);
  cqs_.clear();
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

void on_alarm(int) {}

// A blocking ibv_get_cq_event behaves like rdma-core's read() of the fd: a
// signal handler without SA_RESTART interrupts it (EINTR: qperf ends its
// tests so), one with SA_RESTART does not.
TEST_F(Verbs, GetCqEventAndSignals) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c = cq(64, ch);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  connect(a, a->qp_num);
  ASSERT_EQ(ibv_req_notify_cq(c, 0), 0);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  ASSERT_EQ(sigaction(SIGALRM, &sa, &old), 0);
  itimerval t{};
  t.it_value.tv_usec = 100000;
  ASSERT_EQ(setitimer(ITIMER_REAL, &t, nullptr), 0);
  ibv_cq* ev_cq;
  void* ev_ctx;
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
  EXPECT_EQ(errno, EINTR);

  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGALRM, &sa, nullptr), 0);
  ASSERT_EQ(setitimer(ITIMER_REAL, &t, nullptr), 0);
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ibv_sge s = sge(0, 8);
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = addr(4096);
    wr.wr.rdma.rkey = mr_->rkey;
    ibv_send_wr* bad;
    EXPECT_EQ(ibv_post_send(a, &wr, &bad), 0);
  });
  EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);  // not interrupted at 100 ms
  poster.join();
  EXPECT_EQ(ev_cq, c);
  ibv_ack_cq_events(c, 1);
  EXPECT_EQ(poll(c, 1).size(), 1u);
  sigaction(SIGALRM, &old, nullptr);
  ASSERT_EQ(ibv_destroy_qp(a), 0);
  qps_.clear();
  ASSERT_EQ(ibv_destroy_cq(c), 0);
  cqs_.clear();
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Verbs, SrqLimitAsyncEvent) {
  ibv_srq_init_attr si{};
  si.srq_context = this;
  si.attr = {16, 1, 0};
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  EXPECT_GE(si.attr.max_wr, 16u);
  for (int i = 0; i < 10; ++i) {
    ibv_sge s = sge(4096 * (i + 1), 4096);
    ibv_recv_wr r{};
    r.wr_id = uint64_t(i);
    r.sg_list = &s;
    r.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_srq_recv(srq, &r, &bad), 0);
  }
  ibv_srq_attr lim{0, 0, 8};
  ASSERT_EQ(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), 0);
  ibv_cq* c = cq();
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c, srq);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  for (int i = 0; i < 3; ++i) {
    ibv_sge s = sge(0, 16);
    ibv_send_wr wr{};
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  }
  EXPECT_EQ(poll(c, 6).size(), 6u);
  pollfd pfd{ctx_->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.element.srq, srq);
  EXPECT_EQ(ev.element.srq->srq_context, this);
  ibv_ack_async_event(&ev);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);              // the event disarms the limit
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);  // b uses it
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// Bookkeeping of the two destroy races below.  Each round owns one object
// (a QP, a CQ) from its creation until its destroy returned; a taker
// thread attributes each event it takes to the round owning the event's
// object.  Even rounds destroy at once or after up to 40 us, so that the
// taker, waking, meets the destroy at every point of it; odd rounds
// destroy once the taker took the event.  Each event must be dropped with
// its object or handed out before the destroy, which then waits for its
// ack: it never names an object already destroyed.
class DestroyRace {
 public:
  static constexpr int kRounds = 300;

  void begin(int i, const void* obj) {
    std::lock_guard g(mu_);
    cur_ = obj;
    round_ = i;
  }
  // Between the event's cause and the destroy; false if an odd round's
  // event never came.
  bool pace(int i) {
    if (i % 2 == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(i / 2 % 41);
      while (std::chrono::steady_clock::now() < until) {
      }
      return true;
    }
    std::unique_lock l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(10), [&] { return got_[size_t(i)] > 0; });
  }
  void end() {
    std::lock_guard g(mu_);
    cur_ = nullptr;
    round_ = -1;
  }
  // The taker took an event about `obj` (nullptr: not one of ours), and
  // acks it after this returns.  Counted 50 us later: a destroy that did
  // not wait for the ack has returned by then, making the event stray.
  void saw(const void* obj) {
    int r = -1;
    {
      std::lock_guard g(mu_);
      if (obj && obj == cur_) r = round_;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    {
      std::lock_guard g(mu_);
      if (r >= 0 && r == round_)
        ++got_[size_t(r)];
      else
        ++stray_;
    }
    cv_.notify_all();
  }
  // Once the taker stopped.
  void check() const {
    EXPECT_EQ(stray_, 0);
    int delivered = 0;
    for (int i = 0; i < kRounds; ++i) {
      EXPECT_LE(got_[size_t(i)], 1) << "round " << i;
      delivered += got_[size_t(i)];
    }
    EXPECT_GE(delivered, kRounds / 2);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const void* cur_ = nullptr;
  int round_ = -1;
  std::vector<int> got_ = std::vector<int>(kRounds, 0);
  int stray_ = 0;
};

// ibv_destroy_qp racing a thread that takes async events, as UCX's async
// thread does while its endpoints are torn down: each round's QP raises
// LAST_WQE_REACHED as it moves to ERR.
TEST_F(Verbs, AsyncEventsNeverOutliveTheirQp) {
  ibv_srq_init_attr si{};
  si.attr = {16, 1, 0};
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  ibv_cq* c = cq();
  const int fd = ctx_->async_fd;
  ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
  DestroyRace race;
  std::atomic<bool> stop{false};
  std::thread taker([&] {
    while (!stop.load()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 5) != 1) continue;
      ibv_async_event ev{};
      if (ibv_get_async_event(ctx_, &ev) != 0) continue;  // dropped since the poll
      race.saw(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED ? ev.element.qp : nullptr);
      ibv_ack_async_event(&ev);
    }
  });
  StopAndJoin joiner{stop, taker};
  for (int i = 0; i < DestroyRace::kRounds; ++i) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = c;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap = {4, 0, 1, 0, 0};
    ibv_qp* q = ibv_create_qp(pd_, &a);
    ASSERT_NE(q, nullptr) << std::strerror(errno);
    race.begin(i, q);
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE), 0);
    ASSERT_TRUE(race.pace(i)) << "round " << i;
    ASSERT_EQ(ibv_destroy_qp(q), 0);
    race.end();
  }
  stop.store(true);
  taker.join();  // before reading the counts
  race.check();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// The same race for completion events: each round's QP flushes a receive
// into its armed CQ (an event on a non-blocking channel), then both are
// destroyed.
TEST_F(Verbs, CompletionEventsNeverOutliveTheirCq) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  DestroyRace race;
  std::atomic<bool> stop{false};
  std::thread taker([&] {
    while (!stop.load()) {
      pollfd p{ch->fd, POLLIN, 0};
      if (::poll(&p, 1, 5) != 1) continue;
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) != 0) continue;  // dropped since the poll
      race.saw(ev_cq);
      ibv_ack_cq_events(ev_cq, 1);
    }
  });
  StopAndJoin joiner{stop, taker};
  for (int i = 0; i < DestroyRace::kRounds; ++i) {
    ibv_cq* c = ibv_create_cq(ctx_, 4, nullptr, ch, 0);
    ASSERT_NE(c, nullptr) << std::strerror(errno);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = c;
    a.qp_type = IBV_QPT_RC;
    a.cap = {1, 1, 1, 1, 0};
    ibv_qp* q = ibv_create_qp(pd_, &a);
    ASSERT_NE(q, nullptr) << std::strerror(errno);
    connect(q, q->qp_num);
    ibv_sge s = sge(0, 8);
    ibv_recv_wr rw{};
    rw.sg_list = &s;
    rw.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_recv(q, &rw, &bad), 0);
    race.begin(i, c);
    ASSERT_EQ(ibv_req_notify_cq(c, 0), 0);
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE), 0);  // flushes the receive: an event
    ASSERT_TRUE(race.pace(i)) << "round " << i;
    ASSERT_EQ(ibv_destroy_qp(q), 0);
    ASSERT_EQ(ibv_destroy_cq(c), 0);
    race.end();
  }
  stop.store(true);
  taker.join();  // before reading the counts
  race.check();
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

}  // namespace compat_test
