// PeerProcess: copies to and from another process of this host in one pass,
// stopping at faults, and refusing a process that is gone or not the one
// registered.
#include "net/peer_process.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

#include "net/proc_info.hpp"

namespace uroce::net {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 4;

// A child process holding kPages pages with a known pattern (byte i is
// uint8_t(i * 7 + 3)), page 2 unmapped.  On a byte from the parent it sends
// back the sum of its remaining pages' bytes, then exits.
class Child {
 public:
  Child() {
    int up[2], down[2];
    if (::pipe(up) != 0) throw std::runtime_error("pipe");
    if (::pipe(down) != 0) {
      ::close(up[0]);
      ::close(up[1]);
      throw std::runtime_error("pipe");
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(up[0]);
      ::close(down[1]);
      auto* m = static_cast<uint8_t*>(
          ::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      for (size_t i = 0; i < kPages * kPage; ++i) m[i] = uint8_t(i * 7 + 3);
      ::munmap(m + 2 * kPage, kPage);
      uintptr_t at = reinterpret_cast<uintptr_t>(m);
      if (::write(up[1], &at, sizeof at) != ssize_t(sizeof at)) ::_exit(2);
      char c;
      if (::read(down[0], &c, 1) != 1) ::_exit(3);
      uint64_t sum = 0;
      for (size_t p : {0, 1, 3})
        for (size_t i = 0; i < kPage; ++i) sum += m[p * kPage + i];
      if (::write(up[1], &sum, sizeof sum) != ssize_t(sizeof sum)) ::_exit(4);
      ::_exit(0);
    }
    ::close(up[1]);
    ::close(down[0]);
    up_ = up[0];
    down_ = down[1];
    uintptr_t at = 0;
    if (pid_ < 0 || ::read(up_, &at, sizeof at) != ssize_t(sizeof at)) {
      close_all();
      throw std::runtime_error("no child, or no address from it");
    }
    base_ = at;
  }
  ~Child() { close_all(); }
  pid_t pid() const { return pid_; }
  uint64_t start() const { return proc_stat(pid_).value().start; }
  uintptr_t at(size_t off) const { return base_ + off; }
  // The sum of the child's mapped bytes, as it sees them.
  uint64_t sum() {
    const char c = 1;
    uint64_t s = 0;
    EXPECT_EQ(::write(down_, &c, 1), 1);
    EXPECT_EQ(::read(up_, &s, sizeof s), ssize_t(sizeof s));
    return s;
  }
  // Killed, left a zombie until finish() reaps it.
  void kill() const { ::kill(pid_, SIGKILL); }
  void finish() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  void close_all() {
    finish();
    ::close(up_);
    ::close(down_);
  }

  pid_t pid_ = -1;
  int up_ = -1, down_ = -1;
  uintptr_t base_ = 0;
};

uint8_t pattern(size_t i) { return uint8_t(i * 7 + 3); }

iovec io(void* p, size_t n) { return iovec{p, n}; }
iovec io(uintptr_t p, size_t n) { return iovec{reinterpret_cast<void*>(p), n}; }

TEST(PeerProcess, ReadsRangesByteExactAcrossUnalignedPieces) {
  Child c;
  auto peer = PeerProcess::open(c.pid(), c.start());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  // Two of the child's ranges (the second across a page boundary) into
  // three of ours: one stream of bytes.
  std::vector<uint8_t> a(1000), b(2001), d(3);
  const iovec local[] = {io(a.data(), a.size()), io(b.data(), b.size()), io(d.data(), d.size())};
  const iovec remote[] = {io(c.at(5), 1500), io(c.at(kPage - 7), 1504)};
  auto n = peer->read(local, remote);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(*n, 3004u);
  std::vector<uint8_t> got(a);
  got.insert(got.end(), b.begin(), b.end());
  got.insert(got.end(), d.begin(), d.end());
  for (size_t i = 0; i < 3004; ++i) {
    const size_t off = i < 1500 ? 5 + i : kPage - 7 + (i - 1500);
    ASSERT_EQ(got[i], pattern(off)) << "byte " << i;
  }
}

TEST(PeerProcess, WritesLandInThePeerAndNowhereElse) {
  Child c;
  auto peer = PeerProcess::open(c.pid(), c.start());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  uint64_t before = 0;
  for (size_t p : {0, 1, 3})
    for (size_t i = 0; i < kPage; ++i) before += pattern(p * kPage + i);
  std::vector<uint8_t> src(300, 0xff);
  const iovec local[] = {io(src.data(), src.size())};
  const iovec remote[] = {io(c.at(kPage + 100), src.size())};
  auto n = peer->write(local, remote);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(*n, 300u);
  uint64_t expect = before;
  for (size_t i = 0; i < 300; ++i) expect += 0xff - pattern(kPage + 100 + i);
  EXPECT_EQ(c.sum(), expect);  // those 300 bytes changed, no other
}

TEST(PeerProcess, ACopyStopsAtAHoleAndOneStartingThereIsEfault) {
  Child c;
  auto peer = PeerProcess::open(c.pid(), c.start());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  std::vector<uint8_t> buf(3 * kPage);
  const iovec local[] = {io(buf.data(), buf.size())};
  // Pages 1..3 of the child: page 2 is a hole, the copy stops there.
  const iovec across[] = {io(c.at(kPage + 10), 2 * kPage)};
  auto n = peer->read(local, across);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(*n, kPage - 10);
  EXPECT_EQ(buf[0], pattern(kPage + 10));
  const iovec hole[] = {io(c.at(2 * kPage), 100)};
  EXPECT_EQ(peer->read(local, hole).status().code(), EFAULT);
  EXPECT_EQ(peer->write(local, hole).status().code(), EFAULT);
  // Our side faults the same way: nothing copied, no signal.
  void* ours = ::mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ours, MAP_FAILED);
  const iovec read_only[] = {io(ours, 100)};
  const iovec theirs[] = {io(c.at(0), 100)};
  EXPECT_EQ(peer->read(read_only, theirs).status().code(), EFAULT);
  ::munmap(ours, kPage);
}

TEST(PeerProcess, AnotherStartTimeOrAGoneProcessIsEsrch) {
  Child c;
  const uint64_t start = c.start();
  EXPECT_EQ(PeerProcess::open(c.pid(), start + 1).status().code(), ESRCH);
  auto peer = PeerProcess::open(c.pid(), start);
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  EXPECT_TRUE(peer->alive());
  const pid_t pid = c.pid();
  c.kill();  // a zombie until reaped: gone already
  // /proc shows the leader as a zombie a moment before its last thread (a
  // sanitizer's, say) has gone and the pidfd turns readable: wait for the
  // verdict, bounded, then check the child was never reaped meanwhile.
  bool gone = false;
  for (int i = 0; i < 5000 && !(gone = !peer->alive()); ++i) ::usleep(1000);
  EXPECT_TRUE(gone);
  EXPECT_EQ(proc_stat(pid).value_or(ProcStat{'?', 0}).state, 'Z');
  EXPECT_EQ(PeerProcess::open(pid, start).status().code(), ESRCH);
  c.finish();  // reaped: its pid may go to another process
  EXPECT_FALSE(peer->alive());
  std::vector<uint8_t> buf(8);
  const iovec local[] = {io(buf.data(), buf.size())};
  const iovec remote[] = {io(c.at(0), 8)};
  EXPECT_EQ(peer->read(local, remote).status().code(), ESRCH);
  EXPECT_EQ(PeerProcess::open(pid, start).status().code(), ESRCH);
}

TEST(PeerProcess, TooManyRangesIsEinval) {
  Child c;
  auto peer = PeerProcess::open(c.pid(), c.start());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  std::vector<uint8_t> buf(1);
  std::vector<iovec> many(IOV_MAX + 1, io(buf.data(), 1));
  const iovec one[] = {io(c.at(0), 1)};
  const Status st = peer->read(many, one).status();
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.message().find("ranges (at most"), std::string::npos) << st.to_string();  // ours, not the kernel's
}

// Here (tests run where cross-memory attach is allowed: the copies above
// need it) the process-wide answer says yes.
TEST(PeerProcess, CrossMemoryAttachWorksWhereCopiesDo) {
  Child c;
  auto peer = PeerProcess::open(c.pid(), c.start());
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  uint8_t b = 0;
  const iovec local[] = {io(&b, 1)};
  const iovec remote[] = {io(c.at(0), 1)};
  auto n = peer->read(local, remote);
  if (!n.ok() && n.status().code() == EPERM) GTEST_SKIP() << "cross-memory attach refused here";
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_TRUE(cross_memory_attach_works());
}

// The default: on only with no seccomp filter (one that kills would kill
// the probe) and Yama's ptrace_scope 0 or no Yama (1 refuses every peer).
TEST(PeerProcess, OneCopyIsOnByDefaultOnlyWithoutSeccompAndWithYamaOpen) {
  const std::string free = "Name:\tx\nUid:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
  const std::string filtered = "Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t1\n";
  const std::string strict = "Name:\tx\nSeccomp:\t1\n";
  EXPECT_TRUE(cross_memory_attach_by_default(free, std::nullopt));
  EXPECT_TRUE(cross_memory_attach_by_default(free, "0\n"));
  EXPECT_FALSE(cross_memory_attach_by_default(free, "1\n"));
  EXPECT_FALSE(cross_memory_attach_by_default(free, "2\n"));
  EXPECT_FALSE(cross_memory_attach_by_default(free, "3"));
  EXPECT_FALSE(cross_memory_attach_by_default(filtered, std::nullopt));
  EXPECT_FALSE(cross_memory_attach_by_default(strict, "0"));
  EXPECT_FALSE(cross_memory_attach_by_default("Name:\tx\n", std::nullopt));  // no field: assume the worst
}

// What the kernel writes for a process under a filter (here one that
// allows everything), read by the rule above.
TEST(PeerProcess, AProcessUnderASeccompFilterIsOffByDefault) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog prog{1, allow};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      ::_exit(3);
    char buf[16384];
    const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd < 0 ? -1 : ::read(fd, buf, sizeof buf);
    if (n <= 0) ::_exit(4);
    ::_exit(cross_memory_attach_by_default(std::string_view(buf, size_t(n)), std::nullopt) ? 1 : 0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 3) GTEST_SKIP() << "no seccomp filter could be installed here";
  EXPECT_EQ(WEXITSTATUS(st), 0);
}
}  // namespace
}  // namespace uroce::net
