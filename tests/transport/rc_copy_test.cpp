// The one-copy WRITE and READ between same-host peers
// (docs/one_copy_design.md, requester_copy.cpp, responder_copy.cpp): large
// RC WRITEs over shared memory go as UROCE_COPY_WRITE requests whose bytes
// the responder pulls with process_vm_readv, large READs as
// UROCE_COPY_READ requests it answers with process_vm_writev.  Checked
// here: the bytes, byte for byte, at sizes around the chunk and packet
// edges, through several SGEs and regions with their own iova; the
// counters that show which path carried them; and who takes part (only
// when asked, on both sides).  rc_copy_errors_test.cpp: what goes wrong.
#include "copy_fixture.hpp"

namespace uroce::test {
namespace {

using namespace copy;

class RcCopy : public ::testing::TestWithParam<Mtu> {};

// WRITEs of sizes around the 32 KiB threshold, the 256 KiB chunk and the
// MTU, at odd offsets: every byte lands, nothing past the end is touched,
// and the counters show each WRITE of 32 KiB or more went in requests
// (the smaller ones as packets), all of them carried out.
TEST_P(RcCopy, WritesLandByteForByte) {
  Pair p(copy_options(GetParam()));
  const uint32_t mtu = mtu_bytes(GetParam());
  const std::vector<uint32_t> sizes = {4096,          (32u << 10) - 1,  32u << 10, (64u << 10) + 1,
                                       256u << 10,    (256u << 10) + 3, 1u << 20,  (1u << 20) + mtu - 1,
                                       (4u << 20) + 7};
  uint64_t copied_bytes = 0;
  uint64_t id = 1;
  for (const uint32_t len : sizes) {
    SCOPED_TRACE(::testing::Message() << len << " bytes at MTU " << mtu);
    const size_t src_off = 3, dst_off = 4096 + 5;
    sync_with(p);
    fill_pattern(p.a.buf.data() + src_off, len, uint32_t(len * 31 + id));
    std::memset(p.b.buf.data() + dst_off, kPoison, len + kGuard);
    const Counters before = p.b.counters();
    ASSERT_TRUE(post_write(*p.a.qp, write_wr(id, WrOpcode::rdma_write, p.b, dst_off), {p.a.sge(src_off, len)}).ok());
    auto wc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::success);
    EXPECT_EQ(wc[0].wr_id, id);
    sync_with(p);
    EXPECT_EQ(first_diff(p.b.buf.data() + dst_off, p.a.buf.data() + src_off, len), -1);
    for (size_t i = 0; i < kGuard; ++i)
      ASSERT_EQ(p.b.buf[dst_off + len + i], kPoison) << "byte " << i << " past the end";
    const Counters after = p.b.counters();
    const uint64_t moved = after.resp_copy_bytes - before.resp_copy_bytes;
    if (len >= (32u << 10)) {
      // All of it in requests but perhaps the last packets of the window
      // (a sliver of it goes as packets).
      EXPECT_GT(moved, uint64_t(len) - 4 * mtu);
      EXPECT_LE(moved, len);
    } else {
      EXPECT_EQ(moved, 0u);
    }
    copied_bytes += moved;
    ++id;
  }
  const Counters a = p.a.counters(), b = p.b.counters();
  EXPECT_GT(a.req_copy_writes, 0u);
  EXPECT_EQ(b.resp_copy_writes, a.req_copy_writes);  // none lost, none refused
  EXPECT_EQ(a.req_copy_bytes, copied_bytes);
  EXPECT_EQ(a.req_copy_naks_rcvd, 0u);
  EXPECT_EQ(b.resp_copy_refused + b.resp_copy_requester_faults + b.copy_untrusted, 0u);
  EXPECT_EQ(b.resp_qp_errors, 0u);
}

// READs of the same sizes: every byte lands in the requester's memory,
// nothing past the end, and each READ of 32 KiB or more came in one-copy
// pushes alone (not one response packet), each at most a window.
TEST_P(RcCopy, ReadsLandByteForByte) {
  Pair p(copy_options(GetParam()));
  const uint32_t mtu = mtu_bytes(GetParam());
  const std::vector<uint32_t> sizes = {4096,           (32u << 10) - 1,      32u << 10,     (64u << 10) + 1, 1u << 20,
                                       (1u << 20) + 3, (1u << 20) + mtu - 1, (4u << 20) + 7};
  uint64_t id = 1;
  for (const uint32_t len : sizes) {
    SCOPED_TRACE(::testing::Message() << "READ of " << len << " bytes at MTU " << mtu);
    const size_t src_off = 7, dst_off = 4096 + 1;
    sync_with(p);
    fill_pattern(p.b.buf.data() + src_off, len, uint32_t(len * 17 + id));
    std::memset(p.a.buf.data() + dst_off, kPoison, len + kGuard);
    const Counters a0 = p.a.counters(), b0 = p.b.counters();
    SendWr wr = write_wr(id, WrOpcode::rdma_read, p.b, src_off);
    ASSERT_TRUE(post_write(*p.a.qp, wr, {p.a.sge(dst_off, len)}).ok());
    auto wc = poll_n(*p.a.scq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::success);
    EXPECT_EQ(wc[0].opcode, WcOpcode::rdma_read);
    EXPECT_EQ(wc[0].byte_len, len);
    sync_with(p);
    EXPECT_EQ(first_diff(p.a.buf.data() + dst_off, p.b.buf.data() + src_off, len), -1);
    for (size_t i = 0; i < kGuard; ++i)
      ASSERT_EQ(p.a.buf[dst_off + len + i], kPoison) << "byte " << i << " past the end";
    const Counters a1 = p.a.counters(), b1 = p.b.counters();
    const bool copied = len >= (32u << 10);
    EXPECT_EQ(a1.req_copy_read_bytes - a0.req_copy_read_bytes, copied ? len : 0u);
    EXPECT_EQ(b1.resp_copy_read_bytes - b0.resp_copy_read_bytes, copied ? len : 0u);
    const uint64_t window = std::min<uint64_t>(256, (1u << 20) / mtu) * mtu;  // bytes of one READ request
    EXPECT_EQ(b1.resp_copy_reads - b0.resp_copy_reads, copied ? (len + window - 1) / window : 0u);
    EXPECT_EQ(b1.resp_read_packets - b0.resp_read_packets, copied ? 0u : (len + mtu - 1) / mtu);
    ++id;
  }
  EXPECT_EQ(p.a.counters().req_copy_naks_rcvd, 0u);
  EXPECT_EQ(p.b.counters().resp_qp_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Mtus, RcCopy, ::testing::Values(Mtu::m1024, Mtu::m4096),
                         [](const auto& i) { return "Mtu" + std::to_string(mtu_bytes(i.param)); });

// A WRITE with immediate data from four SGEs of odd lengths: the bytes in
// order, and one receive completion with the immediate data and the
// message's length, as with packets.
TEST(RcCopyMore, WriteWithImmediateFromSeveralSges) {
  Pair p(copy_options());
  const std::vector<uint32_t> lens = {70001, 3, 200000, 65537};
  uint32_t total = 0;
  std::vector<Sge> sges;
  size_t off = 11;
  sync_with(p);
  for (const uint32_t l : lens) {
    fill_pattern(p.a.buf.data() + off, l, l);
    sges.push_back(p.a.sge(off, l));
    off += l + 4093;  // gaps between the pieces
    total += l;
  }
  std::vector<uint8_t> want;
  for (const Sge& s : sges) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(uintptr_t(s.addr));
    want.insert(want.end(), q, q + s.length);
  }
  std::memset(p.b.buf.data(), kPoison, total + kGuard);
  ASSERT_TRUE(post_recv(*p.b.qp, 77, {}).ok());
  SendWr wr = write_wr(9, WrOpcode::rdma_write_with_imm, p.b, 0);
  wr.imm_data = 0x12345678;
  ASSERT_TRUE(post_write(*p.a.qp, wr, sges).ok());
  auto swc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, WcStatus::success);
  auto rwc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::success);
  EXPECT_EQ(rwc[0].wr_id, 77u);
  EXPECT_EQ(rwc[0].opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(rwc[0].byte_len, total);
  EXPECT_EQ(rwc[0].imm_data, 0x12345678u);
  EXPECT_TRUE(rwc[0].wc_flags & wc_flags::kWithImm);
  sync_with(p);
  EXPECT_EQ(first_diff(p.b.buf.data(), want.data(), total), -1);
  EXPECT_EQ(p.b.buf[total], kPoison);
  EXPECT_EQ(p.b.counters().resp_copy_bytes, total);
  EXPECT_EQ(drain(*p.b.rcq, 20).size(), 0u);
}

// WRITEs with immediate data (qperf's rc_rdma_write_bw) that reach the
// responder in one receive batch: each is acknowledged as soon as it is
// copied, one ACK per request, not one for the whole batch after all the
// copies (the requester's window then drained before it opened again).
TEST(RcCopyMore, EachCopiedWriteIsAcknowledgedAtOnce) {
  Pair p(copy_options());
  constexpr uint32_t kLen = 64u << 10;
  constexpr int kWrites = 4;
  sync_with(p);
  fill_pattern(p.a.buf.data(), kWrites * kLen, 5);
  std::memset(p.b.buf.data(), kPoison, kWrites * kLen + kGuard);
  for (int i = 0; i < kWrites; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 200 + uint64_t(i), {}).ok());
  const Counters a0 = p.a.counters(), b0 = p.b.counters();
  {
    // B's NIC is held while A posts: the requests wait in B's ring and are
    // taken in one batch when it lets go.
    std::lock_guard hold(p.b.ctx->nic().mu());
    for (int i = 0; i < kWrites; ++i) {
      SendWr wr = write_wr(10 + uint64_t(i), WrOpcode::rdma_write_with_imm, p.b, size_t(i) * kLen);
      wr.imm_data = uint32_t(i);
      ASSERT_TRUE(post_write(*p.a.qp, wr, {p.a.sge(size_t(i) * kLen, kLen)}).ok());
    }
    {  // (posts behind unacknowledged ones wait for A's next progress)
      std::lock_guard g(p.a.ctx->nic().mu());
      (void)p.a.ctx->nic().drive();
    }
    ASSERT_GE(p.a.counters().req_copy_writes - a0.req_copy_writes, 2u) << "requests in B's ring at once";
  }
  const auto swc = poll_n(*p.a.scq, kWrites);
  ASSERT_EQ(swc.size(), size_t(kWrites));
  for (int i = 0; i < kWrites; ++i) {
    EXPECT_EQ(swc[size_t(i)].status, WcStatus::success);
    EXPECT_EQ(swc[size_t(i)].wr_id, 10 + uint64_t(i));
  }
  const auto rwc = poll_n(*p.b.rcq, kWrites);
  ASSERT_EQ(rwc.size(), size_t(kWrites));
  for (int i = 0; i < kWrites; ++i) {
    EXPECT_EQ(rwc[size_t(i)].status, WcStatus::success);
    EXPECT_EQ(rwc[size_t(i)].imm_data, uint32_t(i));
  }
  sync_with(p);
  EXPECT_EQ(first_diff(p.b.buf.data(), p.a.buf.data(), kWrites * kLen), -1);
  EXPECT_EQ(p.b.buf[kWrites * kLen], kPoison);
  const Counters a1 = p.a.counters(), b1 = p.b.counters();
  const uint64_t copies = b1.resp_copy_writes - b0.resp_copy_writes;
  EXPECT_EQ(copies, a1.req_copy_writes - a0.req_copy_writes);
  EXPECT_GE(copies, uint64_t(kWrites));
  EXPECT_EQ(b1.resp_acks_sent - b0.resp_acks_sent, copies) << "ACKs for " << copies << " copied requests";
  EXPECT_EQ(a1.req_acks_rcvd - a0.req_acks_rcvd, copies);
}

// B's packet I/O, counting the one-copy READ "done" packets of each of its
// sends (read under B's NIC lock, which sends hold).
class DoneCountingIo final : public ForwardingIo {
 public:
  DoneCountingIo(std::unique_ptr<net::PacketIo> io, std::shared_ptr<std::vector<size_t>> per_send)
      : ForwardingIo(std::move(io)), per_send_(std::move(per_send)) {}
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override {
    size_t dones = 0;
    for (const net::TxPacket& x : pkts)
      if (!x.head.empty() && x.head[0] == uint8_t(wire::Opcode::uroce_copy_read_done)) ++dones;
    if (dones > 0) per_send_->push_back(dones);
    return inner_->send_batch(pkts);
  }

 private:
  std::shared_ptr<std::vector<size_t>> per_send_;
};

// READs that reach the responder in one receive batch: each is reported
// done as soon as its bytes are pushed, not all of them together after the
// last push (the requester's completions and window waited for that).
TEST(RcCopyMore, EachCopiedReadIsReportedDoneAtOnce) {
  PairOptions o = copy_options();
  auto per_send = std::make_shared<std::vector<size_t>>();
  o.wrap_b = [per_send](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    return std::make_unique<DoneCountingIo>(std::move(io), per_send);
  };
  Pair p(o);
  constexpr uint32_t kLen = 64u << 10;
  constexpr int kReads = 4;
  sync_with(p);
  fill_pattern(p.b.buf.data(), kReads * kLen, 9);
  std::memset(p.a.buf.data(), kPoison, kReads * kLen + kGuard);
  const Counters b0 = p.b.counters();
  {
    std::lock_guard hold(p.b.ctx->nic().mu());  // (the requests wait in B's ring)
    for (int i = 0; i < kReads; ++i) {
      const size_t off = size_t(i) * kLen;
      ASSERT_TRUE(
          post_write(*p.a.qp, write_wr(20 + uint64_t(i), WrOpcode::rdma_read, p.b, off), {p.a.sge(off, kLen)}).ok());
    }
    std::lock_guard g(p.a.ctx->nic().mu());  // (posts behind unanswered ones wait for A's next progress)
    (void)p.a.ctx->nic().drive();
  }
  const auto wc = poll_n(*p.a.scq, kReads);
  ASSERT_EQ(wc.size(), size_t(kReads));
  for (int i = 0; i < kReads; ++i) {
    EXPECT_EQ(wc[size_t(i)].status, WcStatus::success);
    EXPECT_EQ(wc[size_t(i)].wr_id, 20 + uint64_t(i));
  }
  sync_with(p);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), kReads * kLen), -1);
  EXPECT_EQ(p.a.buf[kReads * kLen], kPoison);
  EXPECT_EQ(p.b.counters().resp_copy_reads - b0.resp_copy_reads, uint64_t(kReads));
  size_t dones = 0, most = 0;
  for (const size_t n : *per_send) {
    dones += n;
    most = std::max(most, n);
  }
  EXPECT_EQ(dones, size_t(kReads));
  EXPECT_EQ(most, 1u) << "done packets in one send, of " << per_send->size() << " sends";
}

// A READ into three SGEs of odd lengths: the bytes in order.
TEST(RcCopyMore, ReadIntoSeveralSges) {
  Pair p(copy_options());
  const std::vector<uint32_t> lens = {100003, 1, 300000};
  std::vector<Sge> sges;
  size_t off = 5, total = 0;
  sync_with(p);
  for (const uint32_t l : lens) {
    std::memset(p.a.buf.data() + off, kPoison, l + 1);
    sges.push_back(p.a.sge(off, l));
    off += l + 999;
    total += l;
  }
  fill_pattern(p.b.buf.data(), total, 99);
  EXPECT_EQ(run_one(p, write_wr(4, WrOpcode::rdma_read, p.b, 0), sges), WcStatus::success);
  sync_with(p);
  size_t at = 0;
  for (const Sge& s : sges) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(uintptr_t(s.addr));
    EXPECT_EQ(first_diff(q, p.b.buf.data() + at, s.length), -1) << "SGE at byte " << at;
    EXPECT_EQ(q[s.length], kPoison);
    at += s.length;
  }
  EXPECT_EQ(p.b.counters().resp_copy_read_bytes, total);
}

// Regions registered with an I/O virtual address other than their own
// (zero-based, as rdma-core's ibv_reg_mr_iova): the requester's SGEs and
// the responder's RETH are in those address spaces, and both copies land
// where the packets would have.
TEST(RcCopyMore, RegionsWithTheirOwnIova) {
  Pair p(copy_options());
  constexpr uint32_t kLen = 300000;
  constexpr uint64_t kIovaA = 0x5000000, kIovaB = 0;
  auto mra = Mr::reg(*p.a.pd, p.a.addr(0), 4u << 20, kIovaA, access::kLocalWrite);
  auto mrb =
      Mr::reg(*p.b.pd, p.b.addr(0), 4u << 20, kIovaB, access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead);
  ASSERT_TRUE(mra.ok() && mrb.ok());
  sync_with(p);
  fill_pattern(p.a.buf.data() + 100, kLen, 21);
  std::memset(p.b.buf.data() + 200, kPoison, kLen + kGuard);
  SendWr wr = write_wr(1, WrOpcode::rdma_write, p.b, 0);
  wr.remote_addr = kIovaB + 200;
  wr.rkey = (*mrb)->rkey();
  EXPECT_EQ(run_one(p, wr, {Sge{kIovaA + 100, kLen, (*mra)->lkey()}}), WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.b.buf.data() + 200, p.a.buf.data() + 100, kLen), -1);
  EXPECT_EQ(p.b.buf[200 + kLen], kPoison);
  // And back: a READ of B's bytes into another part of A's region.
  fill_pattern(p.b.buf.data() + 200, kLen, 22);
  std::memset(p.a.buf.data() + (1u << 20), kPoison, kLen + kGuard);
  wr = write_wr(2, WrOpcode::rdma_read, p.b, 0);
  wr.remote_addr = kIovaB + 200;
  wr.rkey = (*mrb)->rkey();
  EXPECT_EQ(run_one(p, wr, {Sge{kIovaA + (1u << 20), kLen, (*mra)->lkey()}}), WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.a.buf.data() + (1u << 20), p.b.buf.data() + 200, kLen), -1);
  EXPECT_EQ(p.a.buf[(1u << 20) + kLen], kPoison);
  const Counters b = p.b.counters();
  EXPECT_EQ(b.resp_copy_bytes, kLen);
  EXPECT_EQ(b.resp_copy_read_bytes, kLen);
}

// Without the option nothing goes in requests.
TEST(RcCopyMore, OffUnlessAskedFor) {
  Pair p(copy_options(Mtu::m4096, false));
  sync_with(p);
  fill_pattern(p.a.buf.data(), 1u << 20, 5);
  EXPECT_EQ(run_one(p, write_wr(1, WrOpcode::rdma_write, p.b, 0), {p.a.sge(0, 1u << 20)}), WcStatus::success);
  sync_with(p);
  EXPECT_EQ(first_diff(p.b.buf.data(), p.a.buf.data(), 1u << 20), -1);
  EXPECT_EQ(p.a.counters().req_copy_writes, 0u);
  EXPECT_GE(p.b.counters().shm_rx_packets, 256u);
  EXPECT_EQ(run_one(p, write_wr(2, WrOpcode::rdma_read, p.b, 0), {p.a.sge(2u << 20, 1u << 20)}), WcStatus::success);
  EXPECT_EQ(p.a.counters().req_copy_reads, 0u);
  EXPECT_EQ(p.b.counters().resp_read_packets, 256u);
}

}  // namespace
}  // namespace uroce::test
