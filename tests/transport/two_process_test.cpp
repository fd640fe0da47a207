// Two processes on 127.0.0.1: this one and a forked child each open their
// own device (over UDP both receive on port 4791, which they share; over
// shared memory each has a port of its own), exchange QPN, rkey and
// address over pipes, then SEND (both ways), WRITE, READ (50 KB .. 2 MiB:
// GSO trains) and atomics run between them, byte-exact, path MTU 4096.  The
// child reports through its exit code.  Over each packet path between
// processes:
//  - Udp: the UDP sockets;
//  - Shm: UROCE_SHM=1 with a private UROCE_SHM_DIR -- and every packet each
//    NIC received came through its shared-memory ring, none through its
//    socket, with no ICRC failing or needing its IPv4 ID solved; the rings
//    go with their NICs.
//  - ShmCopy: the same with UROCE_SHM_COPY=1 -- and the WRITEs (100 KB,
//    2 MiB) went as one-copy requests the child's NIC carried out with
//    process_vm_readv from this process, the READs (200 KB, 2 MiB) as
//    requests it answered with process_vm_writev into this one
//    (transport/responder_copy.cpp).
#include "two_process.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "net/shm_ring.hpp"

namespace uroce::test {
namespace {

constexpr size_t kBuf = 4 << 20;
constexpr size_t kBig = 2 << 20;  // the big WRITE / READ, at offset kBig

using namespace two_proc;

enum class Between { udp, shm, shm_copy };

bool through_shm(Between path) { return path != Between::udp; }

// Each variant on an address of its own: ctest may run them side by side,
// and the Shm variant counts every packet its NIC received -- a datagram
// the Udp variant's processes sent to a slot that had gone (the shared
// port's default position takes it) would be one too many.
const char* address_of(Between path) {
  return path == Between::udp ? kAddr : path == Between::shm ? "127.0.93.2" : "127.0.93.3";
}

// Every packet the NIC of `e` received came through its ring (none by UDP).
// Returns how many it received; 0 on a mismatch.
uint64_t all_through_ring(const End& e) {
  // Named after our registry slot (the top bits of our QPNs) where the port
  // is shared, else after the endpoint alone.
  const std::string dir = net::shm_dir().value();
  const Endpoint local = e.ctx->nic().local();
  auto ring = net::ShmRing::attach(net::shm_ring_path(dir, local, int(e.info().qpn >> 14)));
  if (!ring.ok()) ring = net::ShmRing::attach(net::shm_ring_path(dir, local));
  if (!ring.ok()) return 0;
  std::lock_guard g(e.ctx->nic().mu());
  const Counters c = e.ctx->nic().snapshot();
  const uint64_t via_ring = (*ring)->header().rx_packets.load();
  if (c.rx_packets != via_ring || c.rx_icrc_bad != 0 || c.rx_icrc_id_solved != 0 || c.rx_malformed != 0) {
    std::printf("pid %d: %llu packets, %llu through the ring, ICRC bad %llu, solved %llu\n", int(getpid()),
                (unsigned long long)c.rx_packets, (unsigned long long)via_ring, (unsigned long long)c.rx_icrc_bad,
                (unsigned long long)c.rx_icrc_id_solved);
    std::fflush(stdout);  // (the child leaves by _exit)
    return 0;
  }
  return via_ring;
}

// The child: exit code 0 on success, else the number of the failed step.
int child_main(int in, int out, Between path) {
  End e(kBuf, Mtu::m4096, address_of(path));
  if (!e.open()) return 10;
  fill_pattern(e.buf.data() + 300000, 200000, 3);  // for the parent's READ
  uint64_t counter = 1000;
  std::memcpy(e.buf.data() + 600000, &counter, 8);
  Info mine = e.info(), peer{};
  if (!write_full(out, &mine, sizeof mine) || !read_full(in, &peer, sizeof peer)) return 12;
  if (!e.connect(peer)) return 13;
  if (!post_recv(*e.qp, 7, {Sge{e.info().addr, 65536, e.mr->lkey()}}).ok()) return 11;
  if (!send_cmd(out, 'C') || !expect_cmd(in, 'C')) return 14;
  if (!e.complete(WcOpcode::recv, 50000, 7) || !e.same(0, 1, 50000)) return 2;  // parent's SEND
  if (!expect_cmd(in, 'W') || !e.same(100000, 2, 100000)) return 3;             // parent's WRITE
  if (!expect_cmd(in, 'B') || !e.same(kBig, 5, kBig)) return 8;                 // parent's big WRITE
  fill_pattern(e.buf.data() + kBig, kBig, 6);                                   // for its big READ
  e.sync();  // the NIC thread that reads it for the READ takes the lock after us
  if (!send_cmd(out, 'b')) return 9;
  if (!expect_cmd(in, 'A')) return 4;  // parent's atomics
  e.sync();
  std::memcpy(&counter, e.buf.data() + 600000, 8);
  if (counter != 5) return 5;
  fill_pattern(e.buf.data() + 700000, 30000, 4);
  if (!e.post(8, WrOpcode::send, 700000, 30000) || !e.complete(WcOpcode::send, 30000, 8)) return 6;
  if (!expect_cmd(in, 'D')) return 7;
  // (Fewer where the WRITEs went as one-copy requests: a few dozen.)
  if (through_shm(path) && all_through_ring(e) < (path == Between::shm_copy ? 10u : 100u)) return 15;
  if (path == Between::shm_copy) {
    std::lock_guard g(e.ctx->nic().mu());
    const Counters c = e.ctx->nic().snapshot();
    // Both WRITEs but what the window's slivers sent as packets.
    if (c.resp_copy_bytes < 100000 + kBig - 8 * 4096 || c.resp_copy_bytes > 100000 + kBig) return 16;
    if (c.resp_copy_refused + c.resp_copy_requester_faults + c.copy_untrusted != 0) return 17;
    if (c.resp_copy_read_bytes != kBig + 200000 || c.resp_read_packets != 0) return 18;  // the READs
  }
  return 0;
}

// Shm: UROCE_SHM=1 and a private UROCE_SHM_DIR for both processes (and
// UROCE_SHM_COPY=1 for ShmCopy); Udp: UROCE_SHM=0 (shared memory is on by
// default).
struct ShmEnv {
  std::unique_ptr<ShmDir> ring_dir;
  std::string dir;
  explicit ShmEnv(Between path) {
    ::setenv("UROCE_SHM_COPY", path == Between::shm_copy ? "1" : "0", 1);
    if (!through_shm(path)) {
      ::setenv("UROCE_SHM", "0", 1);
      return;
    }
    ring_dir = std::make_unique<ShmDir>();
    dir = ring_dir->path();
    ::setenv("UROCE_SHM", "1", 1);
    ::setenv("UROCE_SHM_DIR", dir.c_str(), 1);
  }
  ~ShmEnv() {
    ::unsetenv("UROCE_SHM");
    ::unsetenv("UROCE_SHM_COPY");
    if (!ring_dir) return;
    ::unsetenv("UROCE_SHM_DIR");
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

class TwoProcess : public ::testing::TestWithParam<Between> {};

TEST_P(TwoProcess, SendWriteReadAtomicsBetweenProcesses) {
  const Between path = GetParam();
  ShmEnv env(path);
  if (through_shm(path)) {
    ASSERT_FALSE(env.dir.empty());
  }
  int p2c[2], c2p[2];
  ASSERT_EQ(pipe(p2c), 0);
  ASSERT_EQ(pipe(c2p), 0);
  const pid_t pid = fork();  // before this process opens anything
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(p2c[1]);
    close(c2p[0]);
    _exit(child_main(p2c[0], c2p[1], path));
  }
  close(p2c[0]);
  close(c2p[1]);
  // Under Yama's ptrace scope 1 (Fedora's default) a process may copy from
  // its descendants only: the child's NIC copies from ours (ShmCopy).
  if (path == Between::shm_copy) (void)::prctl(PR_SET_PTRACER, pid, 0, 0, 0);  // (EINVAL without Yama)
  const int in = c2p[0], out = p2c[1];
  auto finish = [&](bool kill_child) {
    if (kill_child) kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(in);
    close(out);
    return status;
  };
  End e(kBuf, Mtu::m4096, address_of(path));
  Info peer{}, mine{};
  int step = 0;
  const bool ok = ++step && e.open() && ++step && read_full(in, &peer, sizeof peer) && ++step &&
                  (mine = e.info(), write_full(out, &mine, sizeof mine)) && ++step && e.connect(peer) && ++step &&
                  send_cmd(out, 'C') && expect_cmd(in, 'C');
  if (!ok) {
    const int st = finish(false);
    FAIL() << "setup failed at step " << step << "; child status " << st << " (exit "
           << (WIFEXITED(st) ? WEXITSTATUS(st) : -1) << ")";
  }
  std::printf("parent QPN 0x%06x on port %u, child QPN 0x%06x on port %u\n", mine.qpn, mine.port, peer.qpn, peer.port);
  EXPECT_NE(mine.qpn >> 14, peer.qpn >> 14) << "two processes share a registry slot";
  // One port for both, the user's shared port (net/port_group.hpp), on either
  // path: the shared-memory rings are named after the registry slots too.
  EXPECT_EQ(mine.port, peer.port);
  // SEND, then WRITE into the child's memory.
  fill_pattern(e.buf.data(), 50000, 1);
  EXPECT_TRUE(e.post(1, WrOpcode::send, 0, 50000) && e.complete(WcOpcode::send, 50000, 1));
  fill_pattern(e.buf.data() + 100000, 100000, 2);
  EXPECT_TRUE(e.post(2, WrOpcode::rdma_write, 100000, 100000, &peer, 100000) &&
              e.complete(WcOpcode::rdma_write, 100000, 2));
  EXPECT_TRUE(send_cmd(out, 'W'));
  // 2 MiB each way: 512 packets of 4 KiB in GSO trains (split into ring
  // slots over shared memory).
  fill_pattern(e.buf.data() + kBig, kBig, 5);
  EXPECT_TRUE(e.post(10, WrOpcode::rdma_write, kBig, kBig, &peer, kBig) && e.complete(WcOpcode::rdma_write, kBig, 10));
  EXPECT_TRUE(send_cmd(out, 'B') && expect_cmd(in, 'b'));
  EXPECT_TRUE(e.post(11, WrOpcode::rdma_read, kBig, kBig, &peer, kBig) && e.complete(WcOpcode::rdma_read, kBig, 11));
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
  if (through_shm(path)) {
    EXPECT_GE(all_through_ring(e), path == Between::shm_copy ? 10u : 100u);
  }
  if (path == Between::shm_copy) {
    std::lock_guard g(e.ctx->nic().mu());
    const Counters c = e.ctx->nic().snapshot();
    EXPECT_GE(c.req_copy_writes, 1u + kBig / (512u << 10));  // 100 KB in one, 2 MiB in chunks of 512 KiB
    // The READs: 2 MiB in two segments of 1 MiB, 200 KB in one; every
    // byte in requests, none as response packets.
    EXPECT_EQ(c.req_copy_reads, 3u);
    EXPECT_EQ(c.req_copy_read_bytes, kBig + 200000);
    EXPECT_EQ(c.req_copy_naks_rcvd, 0u);
  }
  // The child exits on its own; give it the time of a few waits, no more.
  int status = -1;
  for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(50000);
  if (waitpid(pid, nullptr, WNOHANG) == 0)
    status = finish(true);
  else {
    close(in);
    close(out);
  }
  ASSERT_TRUE(WIFEXITED(status)) << "child did not exit (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);
  if (through_shm(path)) {
    EXPECT_EQ(env.files(), 1u);  // ours; the child's NIC removed its ring
    e.close();
    EXPECT_EQ(env.files(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Over, TwoProcess, ::testing::Values(Between::udp, Between::shm, Between::shm_copy),
                         [](const ::testing::TestParamInfo<Between>& i) {
                           return i.param == Between::udp ? "Udp" : i.param == Between::shm ? "Shm" : "ShmCopy";
                         });

}  // namespace
}  // namespace uroce::test
