// The steering program of a port shared by several processes (net/
// steering.hpp), run by the kernel on a real SO_REUSEPORT group: four
// sockets of this process on one loopback address and port stand for four
// processes, and datagrams sent from many source ports (which the kernel's
// hash would spread) must each reach the socket the table names.
#include "net/steering.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace uroce::net {
namespace {

constexpr int kGroup = 4;
// Source ports per datagram: 16, so that the kernel's hash puts them all on
// one socket of four only once in 4^15 runs (hashed() checks the spread).
constexpr int kSenders = 16;

int udp_socket() { return ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

// A datagram for QP `qpn`: a BTH (RC SEND only) and a few bytes.
std::vector<uint8_t> qp_packet(uint32_t qpn) {
  std::vector<uint8_t> p(12 + 16, 0xab);
  p[0] = 0x04;
  p[4] = 0;
  p[5] = uint8_t(qpn >> 16);
  p[6] = uint8_t(qpn >> 8);
  p[7] = uint8_t(qpn);
  return p;
}

void put32(std::vector<uint8_t>& p, size_t off, uint32_t v) {
  p[off] = uint8_t(v >> 24);
  p[off + 1] = uint8_t(v >> 16);
  p[off + 2] = uint8_t(v >> 8);
  p[off + 3] = uint8_t(v);
}

// A MAD to QP1: BTH, DETH, MAD header of `mgmt_class` / `attr`, and a CM
// message whose first 16 bytes are w0..w3 (big-endian words).
std::vector<uint8_t> mad(uint8_t mgmt_class, uint16_t attr, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  std::vector<uint8_t> p = qp_packet(1);
  p.resize(20 + 256, 0);
  p[0] = 0x64;  // UD SEND only
  p[20] = 1;    // base version
  p[21] = mgmt_class;
  p[22] = 2;
  p[23] = 0x03;  // Send
  p[36] = uint8_t(attr >> 8);
  p[37] = uint8_t(attr);
  put32(p, 44, w0);
  put32(p, 48, w1);
  put32(p, 52, w2);
  put32(p, 56, w3);
  return p;
}

class Steering : public ::testing::Test {
 protected:
  void SetUp() override {
    addr_.sin_family = AF_INET;
    addr_.sin_addr.s_addr = htonl(0x7f005b64);  // 127.0.91.100
    for (int i = 0; i < kGroup; ++i) {
      const int fd = udp_socket();
      ASSERT_GE(fd, 0);
      const int one = 1;
      ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one), 0);
      ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_), 0) << std::strerror(errno);
      if (i == 0) {
        socklen_t len = sizeof addr_;
        ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr_), &len), 0);
      }
      group_.push_back(fd);  // position i: the order of joining
    }
    for (int i = 0; i < kSenders; ++i) {
      const int fd = udp_socket();
      ASSERT_GE(fd, 0);
      senders_.push_back(fd);
    }
  }
  void TearDown() override {
    for (int fd : group_) ::close(fd);
    for (int fd : senders_) ::close(fd);
  }

  void attach(const SteeringTable& t) {
    const auto prog = steering_program(t);
    ASSERT_LE(prog.size(), size_t(BPF_MAXINSNS));
    ASSERT_TRUE(attach_steering(group_[0], prog).ok());
  }

  // Sends `p` from every sender; returns how many each group socket got.
  std::vector<int> deliver(const std::vector<uint8_t>& p) {
    for (int s : senders_)
      EXPECT_EQ(::sendto(s, p.data(), p.size(), 0, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_),
                ssize_t(p.size()));
    std::vector<int> got(kGroup, 0);
    int total = 0;
    for (int round = 0; round < 200 && total < kSenders; ++round) {
      std::vector<pollfd> pf;
      for (int fd : group_) pf.push_back({fd, POLLIN, 0});
      if (::poll(pf.data(), pf.size(), 10) <= 0) continue;
      for (int i = 0; i < kGroup; ++i) {
        uint8_t buf[2048];
        while (::recv(group_[i], buf, sizeof buf, 0) > 0) {
          ++got[i];
          ++total;
        }
      }
    }
    return got;
  }

  // Every copy reached position `pos`.
  void lands_on(const std::vector<uint8_t>& p, int pos) {
    std::vector<int> want(kGroup, 0);
    want[pos] = kSenders;
    EXPECT_EQ(deliver(p), want);
  }

  // The kernel's hash placed it: every copy arrived, spread over the
  // sockets by source port (a program returning one index would put all
  // on that one).
  void hashed(const std::vector<uint8_t>& p) {
    const auto got = deliver(p);
    int total = 0, sockets = 0;
    for (int n : got) total += n, sockets += n > 0;
    EXPECT_EQ(total, kSenders);
    EXPECT_GT(sockets, 1) << "every copy on one socket: not hashed";
  }

  sockaddr_in addr_{};
  std::vector<int> group_, senders_;
};

constexpr uint64_t kService = 0x0000000001060000ull | 4321;  // rdma_cm, TCP port space, port 4321

SteeringTable table() {
  SteeringTable t;
  t.slots = {{5, 0}, {9, 1}, {700, 3}, {1023, 2}};
  t.listeners = {{kService, 9}, {kService + 1, 1023}, {kService + 2, 44 /* no position */}};
  return t;
}

TEST_F(Steering, QpDatagramsGoByTheSlotInTheirDestinationQpn) {
  attach(table());
  lands_on(qp_packet(5u << 14 | 3), 0);
  lands_on(qp_packet(9u << 14 | 0x3fff), 1);
  lands_on(qp_packet(700u << 14), 3);
  lands_on(qp_packet(1023u << 14 | 77), 2);
}

TEST_F(Steering, ConnectionRequestsGoToTheListener) {
  attach(table());
  lands_on(mad(0x07, 0x0010, 0x11111111, 0, uint32_t(kService >> 32), uint32_t(kService)), 1);      // REQ
  lands_on(mad(0x07, 0x0017, 0x22222222, 0, uint32_t(kService >> 32), uint32_t(kService)), 1);      // SIDR_REQ
  lands_on(mad(0x07, 0x0010, 0x11111111, 0, uint32_t(kService >> 32), uint32_t(kService + 1)), 2);  // another
  // The same low word under another high word is another service.
  hashed(mad(0x07, 0x0010, 0x11111111, 0, 0x00000002, uint32_t(kService)));
  hashed(mad(0x07, 0x0010, 0x11111111, 0, uint32_t(kService >> 32), uint32_t(kService + 2)));  // no position
}

TEST_F(Steering, OtherCmMessagesGoByTheCommIdTheyAnswer) {
  attach(table());
  for (uint16_t attr : {0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0019, 0x001a}) {
    SCOPED_TRACE(attr);
    lands_on(mad(0x07, attr, 0x99999999, 700u << 22 | 5, 0, 0), 3);  // REP, RTU, DREQ, ...: remote comm ID
  }
  lands_on(mad(0x07, 0x0018, 5u << 22 | 1, 0, 0, 0), 0);  // SIDR_REP: our request ID
}

TEST_F(Steering, WhatTheTableCannotPlaceIsHashed) {
  attach(table());
  hashed(qp_packet(33u << 14));                                                   // a slot without a position
  hashed(std::vector<uint8_t>(5, 0));                                             // shorter than a BTH
  hashed(mad(0x01, 0x0010, 0, 0, uint32_t(kService >> 32), uint32_t(kService)));  // not a CM MAD
  auto short_mad = mad(0x07, 0x0013, 0, 700u << 22, 0, 0);
  short_mad.resize(50);
  hashed(short_mad);                              // cut before its comm IDs
  hashed(mad(0x07, 0x0013, 0, 33u << 22, 0, 0));  // answers a slot without a position
}

// With a position for the rest, what the table cannot place goes there.
TEST_F(Steering, WhatTheTableCannotPlaceGoesToItsDefault) {
  SteeringTable t = table();
  t.otherwise = 2;
  attach(t);
  lands_on(qp_packet(33u << 14), 2);
  lands_on(std::vector<uint8_t>(5, 0), 2);
  lands_on(mad(0x07, 0x0010, 0x11111111, 0, 0x00000002, uint32_t(kService)), 2);  // a service nobody has
  lands_on(qp_packet(5u << 14 | 3), 0);                                           // the table still first
}

// A table larger than one program: what fits is steered, the rest hashed.
TEST_F(Steering, ALargeTableIsCutToTheProgramsRoom) {
  SteeringTable t;
  for (uint32_t s = 1; s < 1024; ++s) t.slots.push_back({s, s % kGroup});
  for (uint32_t i = 0; i < 2000; ++i) t.listeners.push_back({kService + 100 + i, 1 + i % 1023});
  const auto prog = steering_program(t);
  EXPECT_LE(prog.size(), size_t(BPF_MAXINSNS));
  ASSERT_TRUE(attach_steering(group_[0], prog).ok());
  lands_on(qp_packet(6u << 14), 2);
  lands_on(qp_packet(1023u << 14), 3);
}

}  // namespace
}  // namespace uroce::net
