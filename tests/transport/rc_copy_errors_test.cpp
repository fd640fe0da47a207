// The one-copy WRITE and READ when something goes wrong
// (docs/one_copy_design.md): the same completions and QP states as packets
// give when a key, the requester's or the responder's memory is bad; the
// fall-back to packets when the copy is refused; requests duplicated on
// the way copied once; and that a request arriving by UDP moves nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "copy_fixture.hpp"
#include "support/roce_packet.hpp"
#include "wire/copy.hpp"
#include "wire/opcode.hpp"

namespace uroce::test {
namespace {

using namespace copy;

// What the responder sees of a bad WRITE or READ does not depend on the
// path: a wrong rkey and a range past the region's end both complete
// REM_ACCESS_ERR, the responder's QP goes to ERR, counted by cause.
TEST(RcCopyMore, BadKeysFailAsWithPackets) {
  for (const bool copy : {false, true})
    for (const WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_read}) {
      SCOPED_TRACE(::testing::Message() << (copy ? "one copy, " : "packets, ")
                                        << (op == WrOpcode::rdma_read ? "READ" : "WRITE"));
      for (const int bad : {0, 1}) {
        Pair p(copy_options(Mtu::m4096, copy));
        SendWr wr = write_wr(1, op, p.b, 0);
        const std::vector<Sge> sges = {p.a.sge(0, 1u << 20)};
        if (bad == 0)
          wr.rkey ^= 0x100;
        else
          wr.remote_addr = p.b.addr(kBuf - (512u << 10));  // runs past the end
        EXPECT_EQ(run_one(p, wr, sges), WcStatus::rem_access_err);
        EXPECT_TRUE(wait_until([&] { return p.b.qp->query().qp_state == QpState::err; }));
        const Counters b = p.b.counters();
        EXPECT_EQ(bad == 0 ? b.resp_rkey_errors : b.resp_bounds_errors, 1u);
        EXPECT_EQ(b.resp_copy_bytes + b.resp_copy_read_bytes, 0u);
        const Counters a = p.a.counters();
        if (copy)  // the path under test carried it
          EXPECT_GE(a.req_copy_writes + a.req_copy_reads, 1u);
        else
          EXPECT_EQ(a.req_copy_writes + a.req_copy_reads, 0u);
      }
    }
}

// The responder's region re-protected (no access) after registration: a
// READ of it is REM_ACCESS_ERR on both paths, counted as a memory fault.
TEST(RcCopyMore, ResponderRegionGoneIsRemoteAccessErrorForReads) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  for (const bool copy : {false, true}) {
    SCOPED_TRACE(copy ? "one copy" : "packets");
    Pair p(copy_options(Mtu::m4096, copy));
    const size_t len = Revoked::kLen;
    Revoked gone(*p.b.pd, access::kLocalWrite | access::kRemoteRead, 0, PROT_NONE);
    ASSERT_TRUE(gone.ok());
    uint8_t* q = gone.p;
    std::unique_ptr<Mr>& mr = gone.mr;
    SendWr wr = write_wr(1, WrOpcode::rdma_read, p.b, 0);
    wr.remote_addr = uint64_t(uintptr_t(q));
    wr.rkey = mr->rkey();
    EXPECT_EQ(run_one(p, wr, {p.a.sge(0, len)}), WcStatus::rem_access_err);
    const Counters b = p.b.counters();
    EXPECT_EQ(b.resp_memory_faults, 1u);
    EXPECT_EQ(b.resp_copy_read_bytes, 0u);
    EXPECT_EQ(p.a.counters().req_copy_reads, copy ? 1u : 0u);  // the path under test carried it
  }
}

// The requester's sink re-protected read-only after registration: the
// responder's push faults on the requester's side, answers UROCE_COPY_NAK,
// the responses come as packets and fail to land: LOC_PROT_ERR, as without
// the copy, and the sink is untouched.
TEST(RcCopyMore, RequesterSinkReadOnlyFallsBackThenLocalProtectionError) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  Pair p(copy_options());
  const size_t len = Revoked::kLen;
  Revoked gone(*p.a.pd, access::kLocalWrite, 0x42, PROT_READ);
  ASSERT_TRUE(gone.ok());
  uint8_t* q = gone.p;
  std::unique_ptr<Mr>& mr = gone.mr;
  SendWr wr = write_wr(1, WrOpcode::rdma_read, p.b, 0);
  EXPECT_EQ(run_one(p, wr, {Sge{uint64_t(uintptr_t(q)), uint32_t(len), mr->lkey()}}), WcStatus::loc_prot_err);
  const Counters a = p.a.counters(), b = p.b.counters();
  EXPECT_EQ(b.resp_copy_requester_faults, 1u);
  EXPECT_EQ(a.req_copy_naks_rcvd, 1u);
  EXPECT_EQ(b.resp_copy_read_bytes, 0u);
  EXPECT_EQ(b.resp_qp_errors, 0u);
  for (size_t i = 0; i < len; i += 512) ASSERT_EQ(q[i], 0x42) << i;
}

// The responder's region re-protected read-only after registration: the
// copy stops at once, it is the responder's own fault, REM_ACCESS_ERR as
// a packet would get, and not a byte written.
TEST(RcCopyMore, ResponderRegionReadOnlyIsRemoteAccessError) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  Pair p(copy_options());
  const size_t len = Revoked::kLen;
  Revoked gone(*p.b.pd, access::kLocalWrite | access::kRemoteWrite, 0x3c, PROT_READ);
  ASSERT_TRUE(gone.ok());
  uint8_t* q = gone.p;
  std::unique_ptr<Mr>& mr = gone.mr;
  SendWr wr = write_wr(1, WrOpcode::rdma_write, p.b, 0);
  wr.remote_addr = uint64_t(uintptr_t(q));
  wr.rkey = mr->rkey();
  EXPECT_EQ(run_one(p, wr, {p.a.sge(0, len)}), WcStatus::rem_access_err);
  const Counters b = p.b.counters();
  EXPECT_EQ(b.resp_memory_faults, 1u);
  EXPECT_EQ(b.resp_copy_bytes, 0u);
  EXPECT_EQ(b.resp_copy_requester_faults, 0u);
  for (size_t i = 0; i < len; i += 4096) ASSERT_EQ(q[i], 0x3c) << i;
}

// The requester's source re-protected (no access) after it was posted
// checks: the responder's copy faults on the requester's side, answers
// UROCE_COPY_NAK, the requester sends packets, whose gather faults:
// LOC_PROT_ERR, as without the copy.  Nothing lands at the responder.
TEST(RcCopyMore, RequesterSourceGoneFallsBackThenLocalProtectionError) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  Pair p(copy_options());
  const size_t len = Revoked::kLen;
  Revoked gone(*p.a.pd, access::kLocalWrite, 0x77, PROT_NONE);
  ASSERT_TRUE(gone.ok());
  uint8_t* q = gone.p;
  std::unique_ptr<Mr>& mr = gone.mr;
  sync_with(p);
  std::memset(p.b.buf.data(), kPoison, len);
  SendWr wr = write_wr(1, WrOpcode::rdma_write, p.b, 0);
  EXPECT_EQ(run_one(p, wr, {Sge{uint64_t(uintptr_t(q)), uint32_t(len), mr->lkey()}}), WcStatus::loc_prot_err);
  const Counters a = p.a.counters(), b = p.b.counters();
  EXPECT_EQ(b.resp_copy_requester_faults, 1u);
  EXPECT_EQ(a.req_copy_naks_rcvd, 1u);
  EXPECT_EQ(b.resp_copy_bytes, 0u);
  EXPECT_EQ(b.resp_qp_errors, 0u);  // the responder is fine
  sync_with(p);
  for (size_t i = 0; i < len; ++i) ASSERT_EQ(p.b.buf[i], kPoison) << i;
}

// A peer that did not ask for the copy says so in its ring: it is sent
// packets, and never makes a cross-memory call (not even the probe).
TEST(RcCopyMore, APeerThatDidNotAskIsSentPackets) {
  PairOptions o = copy_options();
  o.shm_copy_b = false;
  Pair p(o);
  sync_with(p);
  fill_pattern(p.a.buf.data(), 1u << 20, 8);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(1, WrOpcode::rdma_write, p.b, 0), {p.a.sge(0, 1u << 20)}).ok());
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(2, WrOpcode::rdma_read, p.b, 0), {p.a.sge(2u << 20, 1u << 20)}).ok());
  auto wc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[1].status, WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.a.buf.data() + (2u << 20), p.a.buf.data(), 1u << 20), -1);
  const Counters a = p.a.counters(), b = p.b.counters();
  EXPECT_EQ(a.req_copy_writes + a.req_copy_reads, 0u);
  EXPECT_EQ(b.resp_copy_refused, 0u);
  EXPECT_EQ(b.resp_read_packets, 256u);
}

// Every packet A sends goes twice (a duplicating path): duplicated
// requests are answered without a second copy -- a WRITE's with its ACK, a
// READ's with response packets the requester drops -- so nothing lands in
// A's memory after the READ completed.
class DupRingIo final : public ForwardingIo {
 public:
  using ForwardingIo::ForwardingIo;
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override {
    doubled_.clear();
    for (const net::TxPacket& x : pkts) {
      doubled_.push_back(x);
      doubled_.back().gso_segments = 0;
      doubled_.push_back(doubled_.back());
    }
    return inner_->send_batch(doubled_) / 2;
  }

 private:
  std::vector<net::TxPacket> doubled_;
};

TEST(RcCopyMore, DuplicatedRequestsCopyOnce) {
  PairOptions o = copy_options();
  o.wrap_a = [](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    return std::make_unique<DupRingIo>(std::move(io));
  };
  Pair p(o);
  constexpr uint32_t kLen = 3u << 20;
  sync_with(p);
  fill_pattern(p.a.buf.data(), kLen, 1);
  fill_pattern(p.b.buf.data() + kLen, kLen, 2);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(1, WrOpcode::rdma_write, p.b, 0), {p.a.sge(0, kLen)}).ok());
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(2, WrOpcode::rdma_read, p.b, kLen), {p.a.sge(kLen, kLen)}).ok());
  auto wc = poll_n(*p.a.scq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(wc[1].status, WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.b.buf.data(), p.a.buf.data(), kLen), -1);
  EXPECT_EQ(first_diff(p.a.buf.data() + kLen, p.b.buf.data() + kLen, kLen), -1);
  // The READ's memory is the application's again: nothing may land there.
  std::memset(p.a.buf.data() + kLen, kPoison, kLen);
  drain(*p.a.scq, 100);
  sync_with(p);
  for (size_t i = 0; i < kLen; i += 64) ASSERT_EQ(p.a.buf[kLen + i], kPoison) << "byte " << i << " written late";
  const Counters a = p.a.counters(), b = p.b.counters();
  EXPECT_GT(a.req_copy_writes, 0u);
  EXPECT_EQ(a.req_copy_reads, 3u);          // 3 MiB in segments of 1 MiB
  EXPECT_EQ(b.resp_copy_bytes, kLen);       // each WRITE chunk pulled once
  EXPECT_EQ(b.resp_copy_read_bytes, kLen);  // each READ segment pushed once
  EXPECT_GE(b.resp_duplicates, a.req_copy_writes + a.req_copy_reads);
  EXPECT_EQ(b.resp_qp_errors, 0u);
}

// B's I/O names a requester process that is not there (as when the kernel
// refuses us the peer, or it went away): B answers UROCE_COPY_NAK, A sends
// the rest as packets, and every WRITE still completes with its bytes.
class StaleOwnerIo final : public ForwardingIo {
 public:
  using ForwardingIo::ForwardingIo;
  bool ring_owner(const Endpoint& dst, uint32_t qpn, net::RingOwner& out) noexcept override {
    if (!inner_->ring_owner(dst, qpn, out)) return false;
    ++out.start;  // the pid now names another process
    return true;
  }
};

TEST(RcCopyMore, RefusedCopyFallsBackToPackets) {
  PairOptions o = copy_options();
  o.wrap_b = [](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    return std::make_unique<StaleOwnerIo>(std::move(io));
  };
  Pair p(o);
  const uint32_t len = 3u << 20;
  for (uint64_t id = 1; id <= 3; ++id) {
    sync_with(p);
    fill_pattern(p.a.buf.data() + 1, len, uint32_t(id));
    std::memset(p.b.buf.data(), kPoison, len + kGuard);
    EXPECT_EQ(run_one(p, write_wr(id, WrOpcode::rdma_write, p.b, 0), {p.a.sge(1, len)}), WcStatus::success);
    sync_with(p);
    EXPECT_EQ(first_diff(p.b.buf.data(), p.a.buf.data() + 1, len), -1);
    EXPECT_EQ(p.b.buf[len], kPoison);
  }
  // READs after it come as response packets, byte for byte.
  sync_with(p);
  fill_pattern(p.b.buf.data() + 8, len, 77);
  ASSERT_TRUE(post_write(*p.a.qp, write_wr(9, WrOpcode::rdma_read, p.b, 8), {p.a.sge(3, len)}).ok());
  auto rwc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.a.buf.data() + 3, p.b.buf.data() + 8, len), -1);
  EXPECT_EQ(p.a.counters().req_copy_reads, 0u);
  const Counters a = p.a.counters(), b = p.b.counters();
  // The first request was refused; those A sent behind it before the NAK
  // came (at most a window: 1 MiB, two chunks of 512 KiB) were dropped as
  // out of order, and A sent packets ever after.
  EXPECT_EQ(b.resp_copy_refused, 1u);
  EXPECT_GE(a.req_copy_writes, 1u);
  EXPECT_LE(a.req_copy_writes, 2u);
  EXPECT_EQ(a.req_copy_naks_rcvd, 1u);
  EXPECT_EQ(b.resp_copy_bytes, 0u);
  EXPECT_EQ(b.resp_qp_errors, 0u);
}

// A UROCE_COPY_WRITE or UROCE_COPY_READ that arrives as a UDP datagram --
// from the peer's address, at the expected PSN, naming memory of this very
// process -- is dropped and counted: only our ring can carry one.  Not a
// byte moves either way, and the QP goes on.
TEST(RcCopyMore, RequestsByUdpAreDroppedNotCopied) {
  Pair p(copy_options());
  constexpr uint32_t kLen = 64u << 10;
  sync_with(p);
  fill_pattern(p.a.buf.data(), kLen, 3);
  std::memset(p.b.buf.data(), kPoison, kLen);
  std::memset(p.a.buf.data() + kLen, 0x11, kLen);  // where the forged READ would put B's bytes
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(0x7f000001);  // A's address: B listens to its peer only
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  socklen_t sl = sizeof me;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &sl), 0);
  uint64_t sent = 0;
  for (const wire::Opcode op : {wire::Opcode::uroce_copy_write, wire::Opcode::uroce_copy_read}) {
    const bool write = op == wire::Opcode::uroce_copy_write;
    wire::CopyRequest c;
    c.flags = write ? wire::kCopyFirst | wire::kCopyLast : 0;
    c.packets = kLen / 4096;
    c.bytes = c.length = kLen;
    c.va = p.b.addr(0);
    c.rkey = p.b.mr->rkey();
    c.ranges = {{p.a.addr(write ? 0 : kLen), kLen}};
    std::vector<uint8_t> payload(1024);
    payload.resize(wire::write_copy_request(c, payload));
    ASSERT_FALSE(payload.empty());
    wire::Headers h;
    h.bth.opcode = uint8_t(op);
    h.bth.dest_qp = p.b.qp->qpn();
    h.bth.psn = p.opt.psn_a;
    h.bth.ack_req = true;
    wire::IpUdpFields ip;
    ip.src = p.a.gid();
    ip.dst = p.b.gid();
    ip.src_port = ntohs(me.sin_port);
    ip.dst_port = p.b.endpoint().port;
    const std::vector<uint8_t> dgram = make_udp_payload(h, payload, ip);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(0x7f000002);
    to.sin_port = htons(p.b.endpoint().port);
    ASSERT_EQ(::sendto(fd, dgram.data(), dgram.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              ssize_t(dgram.size()));
    ++sent;
    EXPECT_TRUE(wait_until([&] { return p.b.counters().copy_untrusted == sent; }));
  }
  ::close(fd);
  sync_with(p);
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(p.b.buf[i], kPoison) << i;
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(p.a.buf[kLen + i], 0x11) << i;
  EXPECT_EQ(p.b.counters().resp_copy_bytes + p.b.counters().resp_copy_read_bytes, 0u);
  // The QP is untouched: a real WRITE at that PSN goes through.
  EXPECT_EQ(run_one(p, write_wr(1, WrOpcode::rdma_write, p.b, 0), {p.a.sge(0, kLen)}), WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.b.buf.data(), p.a.buf.data(), kLen), -1);
  EXPECT_EQ(p.b.counters().resp_copy_writes, 1u);
}

}  // namespace
}  // namespace uroce::test
