// Where a QP's packets go: a same-host peer's UDP port comes from the host
// registry by the slot in its QP number, and answers are cached for a
// second.  A process that exits frees its slot, and the next process to
// start claims the same slot, on another port: a QP connecting to it must
// look again (librpma's multiple-connections example: clients 100 ms apart
// got RETRY_EXC_ERR, their READ responses sent to the previous client's
// port).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "net/registry.hpp"
#include "transport/nic.hpp"
#include "transport/peer_ports.hpp"
#include "verbs/context.hpp"

namespace uroce::test {

TEST(PeerResolve, ConnectingLooksUpAPeersSlotAgain) {
  const std::string path = std::string(::testing::TempDir()) + "uroce-resolve-" + std::to_string(getpid());
  ::setenv("UROCE_REGISTRY", path.c_str(), 1);  // before this process's first registry use
  verbs::DeviceConfig cfg;
  cfg.gids = {*IpAddr::parse("127.0.86.1")};
  cfg.udp_port = 0;
  auto ctx = verbs::Context::open(cfg);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  transport::Nic& nic = (*ctx)->nic();
  const IpAddr peer = *IpAddr::parse("127.0.86.2");

  auto first = net::HostRegistry::open(path);  // a peer process
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const uint32_t slot = (*first)->slot();
  const uint32_t qpn = slot << 14 | 7;  // the QP number carries the slot above 14 index bits
  ASSERT_TRUE((*first)->publish(peer, 5001).ok());
  auto port_of = [&](bool fresh) {
    std::lock_guard g(nic.mu());
    return nic.resolve(peer, qpn, fresh).port;
  };
  EXPECT_EQ(port_of(false), 5001);

  (*first)->release();  // it exits; the next one takes its slot, elsewhere
  auto second = net::HostRegistry::open(path);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ((*second)->slot(), slot);
  ASSERT_TRUE((*second)->publish(peer, 5002).ok());
  EXPECT_EQ(port_of(false), 5001) << "the cache answers within its second";
  EXPECT_EQ(port_of(true), 5002) << "a connecting QP looks again";
  EXPECT_EQ(port_of(false), 5002) << "and renews the cache";
  ctx->reset();
  ::unlink(path.c_str());
}

// A peer not (yet) in the registry is at 4791; that answer is kept only
// briefly, so a same-host peer that publishes its port a moment late is
// found without waiting out the second a found port is kept.
TEST(PeerResolve, AMissIsKeptBriefly) {
  const std::string path = std::string(::testing::TempDir()) + "uroce-miss-" + std::to_string(getpid());
  auto mine = net::HostRegistry::open(path);
  auto peer = net::HostRegistry::open(path);
  ASSERT_TRUE(mine.ok() && peer.ok());
  transport::PeerPorts ports(*mine);
  const IpAddr addr = *IpAddr::parse("127.0.86.3");
  const uint32_t qpn = (*peer)->slot() << 14 | 9;
  EXPECT_EQ(ports.resolve(addr, qpn).port, 4791) << "nothing published: RoCEv2's port";
  ASSERT_TRUE((*peer)->publish(addr, 5003).ok());
  EXPECT_EQ(ports.resolve(addr, qpn).port, 4791) << "the miss is cached";
  std::this_thread::sleep_for(transport::PeerPorts::kMissTtl + std::chrono::milliseconds(20));
  EXPECT_EQ(ports.resolve(addr, qpn).port, 5003) << "but only for kMissTtl";
  ::unlink(path.c_str());
}

}  // namespace uroce::test
