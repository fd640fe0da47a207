// PortGroup: one UDP port shared by the processes of one user.  Members are
// registry slots (each HostRegistry::open claims one), in this process or in
// forked children; a datagram for a member's QPs must reach that member's
// socket however members come and go, SIGKILL included.  Every test uses
// its own registry file (so its own port group table).
#include "net/port_group.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "net/registry.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace {

// Each test its own address: ctest runs them at the same time, and groups
// of different registries must not meet on one port.
Endpoint address(int n) { return {*IpAddr::parse("127.0.91." + std::to_string(n)), 4791}; }

// A datagram for QP `qpn` of the registry slot `slot`.
std::vector<uint8_t> for_slot(uint32_t slot, uint32_t index = 7) {
  const uint32_t qpn = slot << 14 | index;
  std::vector<uint8_t> p(40, 0x5c);
  p[0] = 0x04;
  p[4] = 0;
  p[5] = uint8_t(qpn >> 16);
  p[6] = uint8_t(qpn >> 8);
  p[7] = uint8_t(qpn);
  return p;
}

class PortGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/uroce-port-group-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/registry";
    for (int i = 0; i < 8; ++i) {
      UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      ASSERT_TRUE(s.valid());
      senders_.push_back(std::move(s));
    }
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::shared_ptr<HostRegistry> registry() {
    auto r = HostRegistry::open(path_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : nullptr;
  }

  // Sends a datagram for `slot` from each sender (8 source ports).
  void send_to(uint32_t slot) {
    sockaddr_storage ss;
    const socklen_t len = at_.to_sockaddr(ss);
    const auto p = for_slot(slot);
    for (const UniqueFd& s : senders_)
      ASSERT_EQ(::sendto(s.get(), p.data(), p.size(), 0, reinterpret_cast<sockaddr*>(&ss), len), ssize_t(p.size()));
  }

  std::string dir_, path_;
  std::vector<UniqueFd> senders_;
  Endpoint at_;
};

// How many datagrams for `slot` arrive on `fd` (waiting until `want` did,
// or a little); minus the number of others if any other arrived.
int receive(int fd, uint32_t slot, int want) {
  int got = 0, others = 0;
  for (int round = 0; round < 100 && got < want; ++round) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) != 1) continue;
    uint8_t buf[256];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
      const uint32_t qpn = uint32_t(buf[5]) << 16 | uint32_t(buf[6]) << 8 | buf[7];
      if (n == 40 && qpn >> 14 == slot)
        ++got;
      else
        ++others;
    }
  }
  return others ? -others : got;
}

TEST_F(PortGroupTest, EachMemberReceivesItsOwnDatagrams) {
  at_ = address(1);
  auto ra = registry(), rb = registry(), rc = registry();
  ASSERT_TRUE(ra && rb && rc);
  auto a = PortGroup::join(ra, at_, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = PortGroup::join(rb, at_, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto c = PortGroup::join(rc, at_, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*a)->position(), 0u);
  EXPECT_EQ((*b)->position(), 1u);
  EXPECT_EQ((*c)->position(), 2u);
  for (auto* m : {&a, &b, &c}) {
    const PortGroup& g = ***m;
    const uint32_t slot = m == &a ? ra->slot() : m == &b ? rb->slot() : rc->slot();
    send_to(slot);
    EXPECT_EQ(receive(g.fd(), slot, 8), 8) << "slot " << slot;
  }
  // One leaves: the others go on, and its position goes to the next one.
  b->reset();
  send_to(rc->slot());
  EXPECT_EQ(receive((*c)->fd(), rc->slot(), 8), 8);
  auto rd = registry();
  auto d = PortGroup::join(rd, at_, nullptr);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ((*d)->position(), 1u);
  send_to(rd->slot());
  EXPECT_EQ(receive((*d)->fd(), rd->slot(), 8), 8);
  send_to(ra->slot());
  EXPECT_EQ(receive((*a)->fd(), ra->slot(), 8), 8);
}

// A member in another process is killed (SIGKILL: it leaves nothing in
// order); the group goes on, and the next process takes its position.
TEST_F(PortGroupTest, AKilledMembersPositionGoesToTheNextProcess) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer ends a child of a multi-threaded fork that starts threads (die_after_fork)";
#endif
  at_ = address(2);
  int report[2], go[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  // Forked before this process joins (starting the group's thread): the
  // child joins second, once told to.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    PortGroup::after_fork_in_child();
    char join;
    if (::read(go[0], &join, 1) != 1) _exit(4);
    auto rb = HostRegistry::open(path_);
    if (!rb.ok()) _exit(2);
    auto b = PortGroup::join(*rb, at_, nullptr);
    if (!b.ok()) _exit(3);
    const uint32_t v[2] = {(*rb)->slot(), (*b)->position()};
    (void)!::write(report[1], v, sizeof v);
    char c;
    (void)!::read(go[0], &c, 1);  // until killed
    const uint32_t n = uint32_t(receive((*b)->fd(), (*rb)->slot(), 8));
    (void)!::write(report[1], &n, sizeof n);
    ::pause();
    _exit(0);
  }
  auto ra = registry();
  auto a = PortGroup::join(ra, at_, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_EQ(::write(go[1], "j", 1), 1);
  uint32_t v[2] = {};
  ASSERT_EQ(::read(report[0], v, sizeof v), ssize_t(sizeof v));
  EXPECT_EQ(v[1], 1u);
  send_to(v[0]);
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  uint32_t n = 0;
  ASSERT_EQ(::read(report[0], &n, sizeof n), ssize_t(sizeof n));
  EXPECT_EQ(n, 8u) << "the child received its datagrams";
  ::kill(pid, SIGKILL);
  int st;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  send_to(ra->slot());
  EXPECT_EQ(receive((*a)->fd(), ra->slot(), 8), 8);
  send_to(v[0]);  // queued for the dead process: never seen by the next one
  auto rc = registry();
  auto c = PortGroup::join(rc, at_, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->position(), 1u) << "the killed member's position";
  send_to(rc->slot());
  EXPECT_EQ(receive((*c)->fd(), rc->slot(), 8), 8);
  ::close(report[0]), ::close(report[1]), ::close(go[0]), ::close(go[1]);
}

// The member that takes what no QP number places (the lowest position) is
// killed and nobody joins or leaves after: a survivor notices and steers
// again within about kResteerPeriod, and datagrams for slots no process
// holds reach it.
TEST_F(PortGroupTest, ASurvivorSteersAgainWhenTheDefaultMemberIsKilled) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer ends a child of a multi-threaded fork that starts threads (die_after_fork)";
#endif
  at_ = address(5);
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto ra = HostRegistry::open(path_);
    if (!ra.ok()) _exit(2);
    auto a = PortGroup::join(*ra, at_, nullptr);
    if (!a.ok()) _exit(3);
    const uint32_t pos = (*a)->position();
    (void)!::write(report[1], &pos, sizeof pos);
    ::pause();  // until killed
    _exit(0);
  }
  uint32_t pos = 99;
  ASSERT_EQ(::read(report[0], &pos, sizeof pos), ssize_t(sizeof pos));
  ASSERT_EQ(pos, 0u) << "the child founded the group";
  auto rb = registry();
  auto b = PortGroup::join(rb, at_, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ((*b)->position(), 1u);
  constexpr uint32_t kNobody = 1000;  // a slot no process holds
  ASSERT_NE(rb->slot(), kNobody);
  ::kill(pid, SIGKILL);
  int st;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  const auto until = std::chrono::steady_clock::now() + 5 * PortGroup::kResteerPeriod;
  int got = 0;
  while (got == 0 && std::chrono::steady_clock::now() < until) {
    send_to(kNobody);
    got = receive((*b)->fd(), kNobody, 1);
  }
  EXPECT_GT(got, 0) << "datagrams no process's QPs claim still went to the dead member's position";
  send_to(rb->slot());
  EXPECT_EQ(receive((*b)->fd(), rb->slot(), 8), 8);
  ::close(report[0]), ::close(report[1]);
}

// A program that leaves a live member out (built from a wrong view, or by
// anyone holding a socket of the group) strands that member's traffic only
// until the next periodic steer.
TEST_F(PortGroupTest, AProgramThatLeavesAMemberOutHealsWithinAPeriod) {
  at_ = address(7);
  auto ra = registry(), rb = registry();
  ASSERT_TRUE(ra && rb);
  auto a = PortGroup::join(ra, at_, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = PortGroup::join(rb, at_, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  SteeringTable wrong;  // a alone, and the default too
  wrong.slots.push_back({ra->slot(), (*a)->position()});
  wrong.otherwise = (*a)->position();
  const auto prog = steering_program(wrong);
  ASSERT_TRUE(attach_steering((*a)->fd(), prog).ok());
  send_to(rb->slot());
  EXPECT_EQ(receive((*a)->fd(), ra->slot(), 8), -8) << "b's datagrams went to a";
  const auto until = std::chrono::steady_clock::now() + 5 * PortGroup::kResteerPeriod;
  int got = 0;
  while (got == 0 && std::chrono::steady_clock::now() < until) {
    send_to(rb->slot());
    got = receive((*b)->fd(), rb->slot(), 1);
  }
  EXPECT_GT(got, 0) << "the member left out never got its datagrams back";
  send_to(rb->slot());
  EXPECT_EQ(receive((*b)->fd(), rb->slot(), 8), 8);
}

// When every member is gone the group is gone with them: the next process
// founds a new one on the same port.
TEST_F(PortGroupTest, TheLastMemberTakesTheGroupWithIt) {
  at_ = address(3);
  auto ra = registry();
  {
    auto a = PortGroup::join(ra, at_, nullptr);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
  }
  auto rb = registry();
  auto b = PortGroup::join(rb, at_, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ((*b)->position(), 0u);
  send_to(rb->slot());
  EXPECT_EQ(receive((*b)->fd(), rb->slot(), 8), 8);
}

// Members join and leave all the time (a program that opens and closes the
// device while probing it, as UCX does), and at times every live member is
// on its way out: a newcomer waits for them rather than giving up on the
// shared port, and each member gets its own datagrams.
TEST_F(PortGroupTest, MembersComingAndGoingAllTheTimeAllGetThePort) {
  at_ = address(6);
  constexpr int kThreads = 3, kRounds = 40;
  std::vector<std::shared_ptr<HostRegistry>> regs;
  for (int t = 0; t < kThreads; ++t) regs.push_back(registry());
  for (const auto& r : regs) ASSERT_TRUE(r);
  std::atomic<int> refused{0}, lost{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      UniqueFd sender(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_storage ss;
      const socklen_t len = at_.to_sockaddr(ss);
      const auto p = for_slot(regs[t]->slot());
      for (int i = 0; i < kRounds; ++i) {
        auto g = PortGroup::join(regs[t], at_, nullptr);
        if (!g.ok()) {
          ++refused;
          ADD_FAILURE() << g.status().to_string();
          continue;
        }
        (void)::sendto(sender.get(), p.data(), p.size(), 0, reinterpret_cast<sockaddr*>(&ss), len);
        if (receive((*g)->fd(), regs[t]->slot(), 1) != 1) ++lost;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0) << "joins that gave up on the shared port";
  EXPECT_EQ(lost.load(), 0) << "datagrams that missed their member";
}

// Processes of one user with different registries (another UROCE_REGISTRY
// or runtime directory) have different tables, but the kernel puts every
// SO_REUSEPORT socket of the user on the port into one group: two that
// founded at the same moment would share a kernel group whose socket order
// neither table knows, and steer each other's datagrams astray.  Founding
// is atomic across registries: of two founders racing, one gets the port
// and the other is refused (it then takes a port of its own).
TEST_F(PortGroupTest, FoundersOfTwoRegistriesNeverShareTheKernelsGroup) {
  at_ = address(8);
  auto ra = registry();
  auto rb = HostRegistry::open(dir_ + "/registry2");
  ASSERT_TRUE(ra && rb.ok());
  std::vector<std::shared_ptr<HostRegistry>> regs{ra, *rb};
  constexpr int kRounds = 200;
  int both = 0, neither = 0, lost = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> ready{0};
    std::unique_ptr<PortGroup> got[2];
    std::string why[2];
    std::thread t[2];
    for (int i = 0; i < 2; ++i)
      t[i] = std::thread([&, i] {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        auto g = PortGroup::join(regs[i], at_, nullptr);
        if (g.ok())
          got[i] = std::move(*g);
        else
          why[i] = g.status().to_string();
      });
    for (auto& th : t) th.join();
    if (got[0] && got[1]) ++both;
    if (!got[0] && !got[1]) ++neither;
    for (int i = 0; i < 2; ++i) {
      if (!got[i]) continue;
      UniqueFd sender(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_storage ss;
      const socklen_t len = at_.to_sockaddr(ss);
      const auto p = for_slot(regs[i]->slot());
      (void)::sendto(sender.get(), p.data(), p.size(), 0, reinterpret_cast<sockaddr*>(&ss), len);
      if (receive(got[i]->fd(), regs[i]->slot(), 1) != 1) {
        ++lost;
        ADD_FAILURE() << "round " << round << ": founder " << i << " lost its datagram; the other: " << why[1 - i];
      }
    }
  }
  EXPECT_EQ(both, 0) << "rounds where both founded (one kernel group, two tables)";
  EXPECT_EQ(neither, 0) << "rounds where nobody got the port";
  EXPECT_EQ(lost, 0) << "datagrams that missed the founder";
}

// A port held outside a group (a plain socket) cannot be shared.
TEST_F(PortGroupTest, APortHeldOutsideAGroupIsRefused) {
  UniqueFd plain(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  const Endpoint at = address(4);
  ASSERT_EQ(::bind(plain.get(), reinterpret_cast<sockaddr*>(&ss), at.to_sockaddr(ss)), 0);
  auto a = PortGroup::join(registry(), at, nullptr);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), EADDRINUSE) << a.status().to_string();
}

}  // namespace
}  // namespace uroce::net
