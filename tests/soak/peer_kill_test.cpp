// A peer killed mid-transfer (kill -9 of a forked child process): the
// survivor's outstanding work requests complete -- the oldest with
// RETRY_EXC_ERR, the rest flushed -- within the time its timeout, retry_cnt
// and the retry floor (the default, 2 s without an ACK) imply, and
// everything can be destroyed afterwards.  Public C++ API only.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "support/pipe_io.hpp"
#include "uroce/uroce.hpp"

namespace uroce {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBuf = 64 << 20;
constexpr uint32_t kChunk = 1 << 20;

struct Info {
  uint8_t gid[16];
  uint32_t qpn, psn, rkey;
  uint64_t addr;
};

using test::read_full;
using test::write_full;

// One end: device on 127.0.0.1 (ephemeral port), PD, CQ, buffer, RC QP.
struct End {
  std::optional<Context> ctx;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::vector<std::byte> buf = std::vector<std::byte>(kBuf);
  std::optional<MemoryRegion> mr;
  std::optional<QueuePair> qp;

  bool open(uint32_t depth) {
    DeviceInfo d{.name = "peer-kill", .gids = {*IpAddr::parse("127.0.0.1")}, .udp_port = 0};
    d.faults = FaultConfig{};  // no injected faults here
    auto c = Context::open(d);
    if (!c.ok()) return false;
    ctx.emplace(std::move(*c));
    auto p = ctx->alloc_pd();
    if (!p.ok()) return false;
    pd.emplace(std::move(*p));
    auto q = ctx->create_cq(4 * depth);
    if (!q.ok()) return false;
    cq.emplace(std::move(*q));
    auto m = pd->reg_mr(buf.data(), buf.size(),
                        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
    if (!m.ok()) return false;
    mr.emplace(std::move(*m));
    auto qp_r = pd->create_qp({.type = QpType::rc, .send_cq = &*cq, .recv_cq = &*cq, .cap = QpCap{depth, 4, 1, 1, 0}});
    if (!qp_r.ok()) return false;
    qp.emplace(std::move(*qp_r));
    return true;
  }
  Info info() const {
    Info i{};
    const PeerInfo pi = qp->local_info();
    std::memcpy(i.gid, pi.gid.bytes().data(), 16);
    i.qpn = pi.qpn;
    i.psn = pi.psn;
    i.rkey = mr->rkey();
    i.addr = mr->addr();
    return i;
  }
  Status connect(const Info& peer, uint8_t timeout, uint8_t retry_cnt) {
    ConnectOptions o;
    o.timeout = timeout;
    o.retry_cnt = retry_cnt;
    return qp->connect(PeerInfo{IpAddr::from_bytes(peer.gid), peer.qpn, peer.psn, 0}, o);
  }
  void destroy() {
    qp.reset();
    mr.reset();
    cq.reset();
    pd.reset();
    ctx.reset();
  }
};

// The child: connects, says so, then only its NIC's progress thread works.
[[noreturn]] void child_main(int in, int out) {
  End e;
  Info mine{}, peer{};
  if (!e.open(16)) _exit(10);
  mine = e.info();
  if (!write_full(out, &mine, sizeof mine) || !read_full(in, &peer, sizeof peer)) _exit(11);
  if (!e.connect(peer, 14, 7).ok()) _exit(12);
  const char c = 'C';
  if (!write_full(out, &c, 1)) _exit(13);
  for (;;) ::pause();  // until SIGKILL
}

struct Outcome {
  std::vector<Wc> wcs;
  size_t posted = 0;
  double ms_to_error = -1;  // from the kill to the RETRY_EXC_ERR completion
  double ms_to_all = -1;    // from the kill to the last completion
};

// Keeps `depth` WRITE/READ/FETCH_AND_ADD in flight until `kill_after`
// completions, kills the child, then collects the rest.
Outcome run(End& e, const Info& peer, pid_t child, uint32_t depth, int kill_after) {
  Outcome o;
  size_t outstanding = 0;
  int ok_before_kill = 0;
  Clock::time_point t_kill{};
  bool killed = false;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    while (!killed && outstanding < depth) {
      const uint64_t n = o.posted;
      Sge sge;
      SendWr wr;
      wr.wr_id = n;
      wr.send_flags = send_flags::kSignaled;
      switch (n % 3) {
        case 0:
          sge = e.mr->sge((n % 32) * kChunk, kChunk);
          wr.opcode = WrOpcode::rdma_write;
          wr.remote_addr = peer.addr + (n % 32) * kChunk;
          break;
        case 1:
          sge = e.mr->sge(32 * size_t(kChunk) + (n % 30) * kChunk, kChunk);
          wr.opcode = WrOpcode::rdma_read;
          wr.remote_addr = peer.addr + (n % 32) * kChunk;
          break;
        default:
          sge = e.mr->sge(kBuf - 8 * (1 + n % 64), 8);
          wr.opcode = WrOpcode::atomic_fetch_and_add;
          wr.remote_addr = peer.addr + kBuf - 8;
          wr.compare_add = 1;
          break;
      }
      wr.rkey = peer.rkey;
      wr.sg_list = {&sge, 1};
      if (!e.qp->post_send(wr).ok()) break;
      ++o.posted;
      ++outstanding;
    }
    // Killed right after the queue was refilled: `depth` WRs are outstanding
    // then.  (Killed after a poll, it could find none: one poll may complete
    // every outstanding WR.)
    if (!killed && ok_before_kill >= kill_after) {
      ::kill(child, SIGKILL);
      t_kill = Clock::now();
      killed = true;
    }
    Wc wc[16];
    auto r = e.cq->poll(wc);
    if (!r.ok()) break;
    for (int i = 0; i < *r; ++i) {
      o.wcs.push_back(wc[i]);
      --outstanding;
      if (killed && wc[i].status == WcStatus::retry_exc_err && o.ms_to_error < 0)
        o.ms_to_error = std::chrono::duration<double, std::milli>(Clock::now() - t_kill).count();
      if (!killed && wc[i].status == WcStatus::success) ++ok_before_kill;
    }
    if (killed && outstanding == 0) {
      o.ms_to_all = std::chrono::duration<double, std::milli>(Clock::now() - t_kill).count();
      break;
    }
  }
  return o;
}

class PeerKill : public ::testing::Test {
 protected:
  pid_t child = -1;
  int in = -1, out = -1;
  Info peer{};
  End e;

  void start(uint8_t timeout, uint8_t retry_cnt, uint32_t depth) {
    int p2c[2], c2p[2];
    ASSERT_EQ(::pipe(p2c), 0);
    ASSERT_EQ(::pipe(c2p), 0);
    child = ::fork();  // before this process opens anything
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(p2c[1]);
      ::close(c2p[0]);
      child_main(p2c[0], c2p[1]);
    }
    ::close(p2c[0]);
    ::close(c2p[1]);
    in = c2p[0];
    out = p2c[1];
    ASSERT_TRUE(e.open(depth));
    ASSERT_TRUE(read_full(in, &peer, sizeof peer)) << "the child did not start";
    const Info mine = e.info();
    ASSERT_TRUE(write_full(out, &mine, sizeof mine));
    Status s = e.connect(peer, timeout, retry_cnt);
    ASSERT_TRUE(s.ok()) << s.to_string();
    char c = 0;
    ASSERT_TRUE(read_full(in, &c, 1) && c == 'C') << "the child did not connect";
  }
  void TearDown() override {
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
  }
};

TEST_F(PeerKill, OutstandingWorkFailsWithRetryExceededInBoundedTime) {
  constexpr uint8_t kTimeout = 12;  // 4.096 us * 2^12 = 16.8 ms
  constexpr uint8_t kRetry = 3;
  start(kTimeout, kRetry, 12);
  const Outcome o = run(e, peer, child, 12, 20);
  ASSERT_GE(o.ms_to_all, 0) << "outstanding work requests never completed after the kill";
  ASSERT_EQ(o.wcs.size(), o.posted) << "every posted WR completes exactly once";
  // In order: successes, then the oldest outstanding one with RETRY_EXC_ERR,
  // then the flushed rest.
  size_t i = 0;
  while (i < o.wcs.size() && o.wcs[i].status == WcStatus::success) ++i;
  ASSERT_LT(i, o.wcs.size());
  EXPECT_EQ(o.wcs[i].status, WcStatus::retry_exc_err) << to_string(o.wcs[i].status);
  for (++i; i < o.wcs.size(); ++i) EXPECT_EQ(o.wcs[i].status, WcStatus::wr_flush_err) << i;
  for (size_t k = 0; k < o.wcs.size(); ++k) EXPECT_EQ(o.wcs[k].wr_id, k) << "completions out of order";
  // (retry_cnt + 1) timeouts after the last ACK, which came just before the
  // kill, and then the first timeout 2 s after it (the retry floor, longer
  // here).  Generous slack above for loaded machines and sanitizers.
  const double t = 4.096e-3 * (1 << kTimeout);  // ms
  constexpr double kFloor = 2000;               // ms
  std::printf("  RETRY_EXC_ERR %.1f ms after the kill (expected about %.1f), all %zu WRs done after %.1f ms\n",
              o.ms_to_error, kFloor + t, o.wcs.size(), o.ms_to_all);
  EXPECT_GE(o.ms_to_error, kFloor - 100);
  EXPECT_LE(o.ms_to_error, kFloor + 250 + t * 3 + 500);  // resends past retry_cnt come at most 250 ms apart
  EXPECT_EQ(*e.ctx->counter("req_retry_exc"), 1u);
  EXPECT_GE(*e.ctx->counter("req_timeouts"), kRetry + 1 + *e.ctx->counter("req_retry_floor_timeouts"));
  EXPECT_GE(*e.ctx->counter("req_retry_floor_timeouts"), 1u);
  EXPECT_EQ(e.qp->state(), QpState::err);
  // Posting more only flushes.
  Sge sge = e.mr->sge(0, 64);
  SendWr wr{.wr_id = 999,
            .opcode = WrOpcode::rdma_write,
            .send_flags = send_flags::kSignaled,
            .sg_list = {&sge, 1},
            .remote_addr = peer.addr,
            .rkey = peer.rkey};
  ASSERT_TRUE(e.qp->post_send(wr).ok());
  Wc wc;
  auto r = e.cq->poll_for({&wc, 1}, std::chrono::milliseconds(2000));
  ASSERT_TRUE(r.ok() && *r == 1);
  EXPECT_EQ(wc.status, WcStatus::wr_flush_err);
  // Everything can be destroyed, promptly.
  const auto t0 = Clock::now();
  e.destroy();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(PeerKill, DestroyingEverythingWhileRetryingDoesNotHang) {
  start(14, 7, 12);  // 67 ms x 8 tries: still retrying when we tear down
  Sge sge = e.mr->sge(0, kChunk);
  SendWr wr{.wr_id = 1,
            .opcode = WrOpcode::rdma_write,
            .send_flags = send_flags::kSignaled,
            .sg_list = {&sge, 1},
            .remote_addr = peer.addr,
            .rkey = peer.rkey};
  Wc wc;
  ASSERT_TRUE(e.qp->post_send(wr).ok());
  ASSERT_TRUE(e.cq->poll_for({&wc, 1}, std::chrono::milliseconds(5000)).ok());
  EXPECT_EQ(wc.status, WcStatus::success);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  child = -1;
  for (uint64_t n = 2; n < 10; ++n) {
    wr.wr_id = n;
    ASSERT_TRUE(e.qp->post_send(wr).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a retry or two
  const auto t0 = Clock::now();
  e.destroy();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

}  // namespace
}  // namespace uroce
