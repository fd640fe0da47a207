// Two processes on 127.0.0.1 with UROCE_SHM=1: the same SEND (both ways),
// WRITE, READ and atomics as two_process_test, byte-exact, plus a 2 MiB
// WRITE and READ (GSO trains, several laps of a small ring), path MTU 4096
// (full-size slots) -- and every packet each NIC received came through its
// shared-memory ring, none through its UDP socket, with no ICRC failing or
// needing its IPv4 ID solved.  The child reports through its exit code.
// The rings live in a private directory, removed at the end.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <cstdlib>
#include <string>

#include "loopback.hpp"
#include "net/shm_ring.hpp"

namespace uroce::test {
namespace {

constexpr size_t kBuf = 4 << 20;
constexpr size_t kBig = 2 << 20;  // the big WRITE / READ, at offset kBig
constexpr int kWaitMs = 10000;

struct Info {
  uint32_t qpn, rkey;
  uint64_t addr;
  uint16_t port;
};

bool read_full(int fd, void* p, size_t n, int ms = kWaitMs) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, ms) != 1) return false;
    const ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}
bool write_full(int fd, const void* p, size_t n) { return ::write(fd, p, n) == ssize_t(n); }
bool send_cmd(int fd, char c) { return write_full(fd, &c, 1); }
bool expect_cmd(int fd, char c) {
  char got = 0;
  return read_full(fd, &got, 1) && got == c;
}

// One process's end: device, PD, CQ, RC QP, 1 MiB registered buffer.
struct End {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf);
  std::unique_ptr<Mr> mr;

  bool open() {
    DeviceConfig cfg;
    cfg.gids.push_back(*IpAddr::parse("127.0.0.1"));  // port 4791, falling back to an ephemeral one
    auto c = Context::open(cfg);
    if (!c.ok()) return false;
    ctx = std::move(*c);
    pd = std::make_unique<Pd>(*ctx);
    auto q = Cq::create(*ctx, 64, nullptr);
    if (!q.ok()) return false;
    cq = std::move(*q);
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq.get();
    init.cap = QpCap{16, 16, 1, 1, 0};
    auto qp_r = Qp::create(*pd, init);
    if (!qp_r.ok()) return false;
    qp = std::move(*qp_r);
    auto m = Mr::reg(*pd, uint64_t(uintptr_t(buf.data())), kBuf, uint64_t(uintptr_t(buf.data())),
                     access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
    if (!m.ok()) return false;
    mr = std::move(*m);
    return true;
  }
  void close() {  // children first
    mr.reset();
    qp.reset();
    cq.reset();
    pd.reset();
    ctx.reset();
  }
  Info info() const { return {qp->qpn(), mr->rkey(), uint64_t(uintptr_t(buf.data())), ctx->nic().local().port}; }
  bool connect(const Info& peer) {
    QpAttr a;
    a.qp_state = QpState::init;
    a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    if (!qp->modify(a, qp_attr_mask::kState | qp_attr_mask::kPkeyIndex | qp_attr_mask::kPort |
                           qp_attr_mask::kAccessFlags).ok())
      return false;
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::m4096;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = 0x100;
    a.ah_attr.dgid = *IpAddr::parse("127.0.0.1");
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    if (!qp->modify(a, qp_attr_mask::kState | qp_attr_mask::kAv | qp_attr_mask::kPathMtu |
                           qp_attr_mask::kDestQpn | qp_attr_mask::kRqPsn | qp_attr_mask::kMaxDestRdAtomic |
                           qp_attr_mask::kMinRnrTimer).ok())
      return false;
    a.qp_state = QpState::rts;
    a.sq_psn = 0x100;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    return qp->modify(a, qp_attr_mask::kState | qp_attr_mask::kSqPsn | qp_attr_mask::kTimeout |
                             qp_attr_mask::kRetryCnt | qp_attr_mask::kRnrRetry | qp_attr_mask::kMaxQpRdAtomic)
        .ok();
  }
  // One successful completion of `opc` with `len` bytes (and wr_id `id`).
  bool complete(WcOpcode opc, uint32_t len, uint64_t id) {
    auto wc = poll_n(*cq, 1, kWaitMs);
    return wc.size() == 1 && wc[0].status == WcStatus::success && wc[0].opcode == opc &&
           wc[0].byte_len == len && wc[0].wr_id == id;
  }
  bool post(uint64_t id, WrOpcode opc, size_t off, uint32_t len, const Info* peer = nullptr, uint64_t roff = 0,
            uint64_t add = 0, uint64_t swap = 0) {
    Sge s = Sge{uint64_t(uintptr_t(buf.data() + off)), len, mr->lkey()};
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = opc;
    wr.send_flags = send_flags::kSignaled;
    wr.sg_list = {&s, 1};
    if (peer) {
      wr.remote_addr = peer->addr + roff;
      wr.rkey = peer->rkey;
    }
    wr.compare_add = add;
    wr.swap = swap;
    return post_send(*qp, wr).ok();
  }
  // The NIC writes our buffer under its lock, and we learn of it through a
  // pipe, which ThreadSanitizer cannot see: taking the lock orders our reads.
  void sync() const { std::lock_guard g(ctx->nic().mu()); }
  // Every packet this NIC received came through its ring (none by UDP).
  // Returns how many it received; 0 on a mismatch.
  uint64_t all_through_ring() const {
    auto ring = net::ShmRing::attach(net::shm_ring_path(net::shm_dir(), ctx->nic().local()));
    if (!ring.ok()) return 0;
    std::lock_guard g(ctx->nic().mu());
    const Counters c = ctx->nic().snapshot();
    const uint64_t via_ring = (*ring)->header().rx_packets.load();
    if (c.rx_packets != via_ring || c.rx_icrc_bad != 0 || c.rx_icrc_id_solved != 0 || c.rx_malformed != 0) {
      std::printf("pid %d: %llu packets, %llu through the ring, ICRC bad %llu, solved %llu\n", int(getpid()),
                  (unsigned long long)c.rx_packets, (unsigned long long)via_ring,
                  (unsigned long long)c.rx_icrc_bad, (unsigned long long)c.rx_icrc_id_solved);
      return 0;
    }
    return via_ring;
  }
  bool same(size_t off, uint32_t seed, size_t len) const {
    sync();
    std::vector<uint8_t> want(len);
    fill_pattern(want.data(), len, seed);
    return std::memcmp(want.data(), buf.data() + off, len) == 0;
  }
};

// The child: exit code 0 on success, else the number of the failed step.
int child_main(int in, int out) {
  End e;
  if (!e.open()) return 10;
  fill_pattern(e.buf.data() + 300000, 200000, 3);  // for the parent's READ
  uint64_t counter = 1000;
  std::memcpy(e.buf.data() + 600000, &counter, 8);
  Info mine = e.info(), peer{};
  if (!write_full(out, &mine, sizeof mine) || !read_full(in, &peer, sizeof peer)) return 12;
  if (!e.connect(peer)) return 13;
  if (!post_recv(*e.qp, 7, {Sge{e.info().addr, 65536, e.mr->lkey()}}).ok()) return 11;
  if (!send_cmd(out, 'C') || !expect_cmd(in, 'C')) return 14;
  if (!e.complete(WcOpcode::recv, 50000, 7) || !e.same(0, 1, 50000)) return 2;        // parent's SEND
  if (!expect_cmd(in, 'W') || !e.same(100000, 2, 100000)) return 3;                    // parent's WRITE
  if (!expect_cmd(in, 'B') || !e.same(kBig, 5, kBig)) return 8;                     // parent's big WRITE
  fill_pattern(e.buf.data() + kBig, kBig, 6);                                          // for its big READ
  e.sync();  // the NIC thread that reads it for the READ takes the lock after us
  if (!send_cmd(out, 'b')) return 9;
  if (!expect_cmd(in, 'A')) return 4;                                                  // parent's atomics
  e.sync();
  std::memcpy(&counter, e.buf.data() + 600000, 8);
  if (counter != 5) return 5;
  fill_pattern(e.buf.data() + 700000, 30000, 4);
  if (!e.post(8, WrOpcode::send, 700000, 30000) || !e.complete(WcOpcode::send, 30000, 8)) return 6;
  if (!expect_cmd(in, 'D')) return 7;
  if (e.all_through_ring() < 100) return 15;
  return 0;
}

// UROCE_SHM=1 and a private UROCE_SHM_DIR for both processes.
struct ShmEnv {
  std::string dir;
  ShmEnv() {
    char tmpl[] = "/dev/shm/uroce-shm-2p-XXXXXX";
    if (::mkdtemp(tmpl)) dir = tmpl;
    ::setenv("UROCE_SHM", "1", 1);
    ::setenv("UROCE_SHM_DIR", dir.c_str(), 1);
  }
  ~ShmEnv() {
    ::unsetenv("UROCE_SHM");
    ::unsetenv("UROCE_SHM_DIR");
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') ::unlink((dir + "/" + e->d_name).c_str());
      ::closedir(d);
    }
    ::rmdir(dir.c_str());
  }
  size_t files() const {
    size_t n = 0;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
      ::closedir(d);
    }
    return n;
  }
};

TEST(ShmTwoProcess, SendWriteReadAtomicsThroughSharedMemory) {
  ShmEnv env;
  ASSERT_FALSE(env.dir.empty());
  int p2c[2], c2p[2];
  ASSERT_EQ(pipe(p2c), 0);
  ASSERT_EQ(pipe(c2p), 0);
  const pid_t pid = fork();  // before this process opens anything
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(p2c[1]);
    close(c2p[0]);
    _exit(child_main(p2c[0], c2p[1]));
  }
  close(p2c[0]);
  close(c2p[1]);
  const int in = c2p[0], out = p2c[1];
  auto finish = [&](bool kill_child) {
    if (kill_child) kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(in);
    close(out);
    return status;
  };
  End e;
  Info peer{}, mine{};
  int step = 0;
  const bool ok = ++step && e.open() && ++step && read_full(in, &peer, sizeof peer) && ++step &&
                  (mine = e.info(), write_full(out, &mine, sizeof mine)) && ++step && e.connect(peer) &&
                  ++step && send_cmd(out, 'C') && expect_cmd(in, 'C');
  if (!ok) {
    const int st = finish(false);
    FAIL() << "setup failed at step " << step << "; child status " << st << " (exit "
           << (WIFEXITED(st) ? WEXITSTATUS(st) : -1) << ")";
  }
  std::printf("parent QPN 0x%06x on port %u, child QPN 0x%06x on port %u\n", mine.qpn, mine.port, peer.qpn,
              peer.port);
  EXPECT_NE(mine.qpn >> 14, peer.qpn >> 14) << "two processes share a registry slot";
  EXPECT_NE(mine.port, peer.port);  // at most one of them holds 4791
  // SEND, then WRITE into the child's memory.
  fill_pattern(e.buf.data(), 50000, 1);
  EXPECT_TRUE(e.post(1, WrOpcode::send, 0, 50000) && e.complete(WcOpcode::send, 50000, 1));
  fill_pattern(e.buf.data() + 100000, 100000, 2);
  EXPECT_TRUE(e.post(2, WrOpcode::rdma_write, 100000, 100000, &peer, 100000) &&
              e.complete(WcOpcode::rdma_write, 100000, 2));
  EXPECT_TRUE(send_cmd(out, 'W'));
  // 2 MiB each way: 512 packets of 4 KiB, GSO trains split into slots.
  fill_pattern(e.buf.data() + kBig, kBig, 5);
  EXPECT_TRUE(e.post(10, WrOpcode::rdma_write, kBig, kBig, &peer, kBig) &&
              e.complete(WcOpcode::rdma_write, kBig, 10));
  EXPECT_TRUE(send_cmd(out, 'B') && expect_cmd(in, 'b'));
  EXPECT_TRUE(e.post(11, WrOpcode::rdma_read, kBig, kBig, &peer, kBig) &&
              e.complete(WcOpcode::rdma_read, kBig, 11));
  EXPECT_TRUE(e.same(kBig, 6, kBig));
  // READ the child's pattern.
  EXPECT_TRUE(e.post(3, WrOpcode::rdma_read, 300000, 200000, &peer, 300000) &&
              e.complete(WcOpcode::rdma_read, 200000, 3));
  EXPECT_TRUE(e.same(300000, 3, 200000));
  // FETCH_ADD and COMPARE_SWAP on the child's counter (1000).
  uint64_t orig = 0;
  EXPECT_TRUE(e.post(4, WrOpcode::atomic_fetch_and_add, 600000, 8, &peer, 600000, 7) &&
              e.complete(WcOpcode::fetch_add, 8, 4));
  std::memcpy(&orig, e.buf.data() + 600000, 8);
  EXPECT_EQ(orig, 1000u);
  EXPECT_TRUE(e.post(5, WrOpcode::atomic_cmp_and_swp, 600008, 8, &peer, 600000, 1007, 5) &&
              e.complete(WcOpcode::comp_swap, 8, 5));
  std::memcpy(&orig, e.buf.data() + 600008, 8);
  EXPECT_EQ(orig, 1007u);
  // The child SENDs back.
  EXPECT_TRUE(post_recv(*e.qp, 9, {Sge{e.info().addr + 800000, 65536, e.mr->lkey()}}).ok());
  EXPECT_TRUE(send_cmd(out, 'A'));
  EXPECT_TRUE(e.complete(WcOpcode::recv, 30000, 9));
  EXPECT_TRUE(e.same(800000, 4, 30000));
  EXPECT_TRUE(send_cmd(out, 'D'));
  EXPECT_GE(e.all_through_ring(), 100u);
  // The child exits on its own; give it the time of a few waits, no more.
  int status = -1;
  for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(50000);
  if (waitpid(pid, nullptr, WNOHANG) == 0) status = finish(true);
  else {
    close(in);
    close(out);
  }
  ASSERT_TRUE(WIFEXITED(status)) << "child did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);
  EXPECT_EQ(env.files(), 1u);  // ours; the child's NIC removed its ring
  e.close();
  EXPECT_EQ(env.files(), 0u);
}

}  // namespace
}  // namespace uroce::test
