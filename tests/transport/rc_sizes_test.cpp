// RC SEND, RDMA WRITE and RDMA READ at every path MTU and at the message
// sizes where packetisation has edges: 0, 1, mtu-1, mtu, mtu+1, 3*mtu+7,
// 64 KiB, 1 MiB and 16 MiB.  Every byte is checked, and so is the memory
// right behind the destination (nothing may be written past the message).
#include <tuple>

#include "loopback.hpp"

namespace uroce::test {
namespace {

enum class Op { send, write, read };
const char* op_name(Op op) { return op == Op::send ? "Send" : op == Op::write ? "Write" : "Read"; }

constexpr size_t kMax = 16u << 20;
constexpr size_t kSrcOff = 3;  // odd offsets: nothing relies on alignment
constexpr size_t kDstOff = 5;
constexpr size_t kGuard = 64;  // bytes after the destination that must stay untouched
constexpr uint8_t kPoison = 0xa5;

class RcSizes : public ::testing::TestWithParam<std::tuple<Mtu, Op>> {
 protected:
  static PairOptions options() {
    PairOptions o;
    o.mtu = std::get<0>(GetParam());
    o.buf_size = kMax + 4096;
    return o;
  }
  Pair p{options()};
  const uint32_t mtu = mtu_bytes(std::get<0>(GetParam()));
  const Op op = std::get<1>(GetParam());

  std::vector<uint32_t> sizes() const {
    return {0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 7, 64u << 10, 1u << 20, uint32_t(kMax)};
  }

  // Runs one message of `len` bytes and checks data and completions.
  void run(uint32_t len, uint64_t id) {
    SCOPED_TRACE(::testing::Message() << op_name(op) << " of " << len << " bytes at MTU " << mtu);
    // Source: A's buffer (B's for READ); destination: the other one.
    Side& src = op == Op::read ? p.b : p.a;
    Side& dst = op == Op::read ? p.a : p.b;
    // The NICs last touched these buffers under their locks, and we learnt
    // of it through a UDP socket, which ThreadSanitizer cannot see: take
    // both locks to order our writes after those accesses.
    { std::lock_guard g(src.ctx->nic().mu()); }
    { std::lock_guard g(dst.ctx->nic().mu()); }
    fill_pattern(src.buf.data() + kSrcOff, len, uint32_t(id * 7919 + len));
    std::memset(dst.buf.data() + kDstOff, kPoison, len + kGuard);

    SendWr wr;
    wr.wr_id = id;
    wr.send_flags = send_flags::kSignaled;
    Sge sge;
    if (op == Op::send) {
      ASSERT_TRUE(post_recv(*p.b.qp, id + 1000, {p.b.sge(kDstOff, len)}).ok());
      wr.opcode = WrOpcode::send;
      sge = p.a.sge(kSrcOff, len);
    } else if (op == Op::write) {
      wr.opcode = WrOpcode::rdma_write;
      sge = p.a.sge(kSrcOff, len);
      wr.remote_addr = p.b.addr(kDstOff);
      wr.rkey = p.b.mr->rkey();
    } else {
      wr.opcode = WrOpcode::rdma_read;
      sge = p.a.sge(kDstOff, len);
      wr.remote_addr = p.b.addr(kSrcOff);
      wr.rkey = p.b.mr->rkey();
    }
    wr.sg_list = {&sge, 1};
    ASSERT_TRUE(post_send(*p.a.qp, wr).ok());

    auto sc = poll_n(*p.a.scq, 1, 20000);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, WcStatus::success) << to_string(sc[0].status);
    EXPECT_EQ(sc[0].wr_id, id);
    EXPECT_EQ(sc[0].opcode, op == Op::send    ? WcOpcode::send
                            : op == Op::write ? WcOpcode::rdma_write
                                              : WcOpcode::rdma_read);
    EXPECT_EQ(sc[0].byte_len, len);
    EXPECT_EQ(sc[0].qp_num, p.a.qp->qpn());
    if (op == Op::send) {
      auto rc = poll_n(*p.b.rcq, 1, 20000);
      ASSERT_EQ(rc.size(), 1u);
      EXPECT_EQ(rc[0].status, WcStatus::success) << to_string(rc[0].status);
      EXPECT_EQ(rc[0].wr_id, id + 1000);
      EXPECT_EQ(rc[0].opcode, WcOpcode::recv);
      EXPECT_EQ(rc[0].byte_len, len);
      EXPECT_EQ(rc[0].wc_flags, 0u);
      EXPECT_EQ(rc[0].qp_num, p.b.qp->qpn());
      EXPECT_EQ(rc[0].src_qp, p.a.qp->qpn());
    }
    { std::lock_guard g(dst.ctx->nic().mu()); }  // (the same, for our reads)
    EXPECT_EQ(first_diff(src.buf.data() + kSrcOff, dst.buf.data() + kDstOff, len), -1);
    std::vector<uint8_t> poison(kGuard, kPoison);
    EXPECT_EQ(first_diff(dst.buf.data() + kDstOff + len, poison.data(), kGuard), -1)
        << "bytes written past the end of the message";
  }
};

TEST_P(RcSizes, EverySizeIsByteExact) {
  uint64_t id = 1;
  for (uint32_t len : sizes()) {
    run(len, id++);
    if (HasFatalFailure()) return;
  }
  // WRITE and READ never consume a receive on the responder; SEND consumed
  // exactly one each.
  EXPECT_TRUE(drain(*p.b.rcq, 10).empty());
  EXPECT_TRUE(drain(*p.a.scq, 1).empty());
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::rts);
}

// Several zero-length messages back to back, mixed with a non-empty one:
// each completes once, in order, with byte_len 0.
class RcZeroLength : public ::testing::TestWithParam<Mtu> {
 protected:
  static PairOptions options() {
    PairOptions o;
    o.mtu = GetParam();
    return o;
  }
  Pair p{options()};
};

TEST_P(RcZeroLength, MixedWithOneByteMessagesCompleteInOrder) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(post_recv(*p.b.qp, 500 + i, {p.b.sge(0, 16)}).ok());
  std::memset(p.b.buf.data(), kPoison, 64);
  SendWr wrs[6];
  Sge empty = p.a.sge(0, 0);
  Sge one = p.a.sge(0, 1);
  p.a.buf[0] = 0x42;
  const WrOpcode ops[6] = {WrOpcode::send, WrOpcode::rdma_write, WrOpcode::rdma_read,
                           WrOpcode::send, WrOpcode::rdma_write, WrOpcode::send};
  for (int i = 0; i < 6; ++i) {
    wrs[i].wr_id = 10 + i;
    wrs[i].opcode = ops[i];
    wrs[i].send_flags = send_flags::kSignaled;
    wrs[i].sg_list = i == 5   ? std::span<const Sge>(&one, 1)
                     : i == 3 ? std::span<const Sge>()  // no SGE at all
                              : std::span<const Sge>(&empty, 1);
    wrs[i].remote_addr = p.b.addr(32);
    wrs[i].rkey = p.b.mr->rkey();
  }
  size_t bad = 99;
  ASSERT_TRUE(p.a.qp->post_send(wrs, &bad).ok());
  EXPECT_EQ(bad, 6u);
  auto sc = poll_n(*p.a.scq, 6);
  ASSERT_EQ(sc.size(), 6u);
  const WcOpcode want[6] = {WcOpcode::send, WcOpcode::rdma_write, WcOpcode::rdma_read,
                            WcOpcode::send, WcOpcode::rdma_write, WcOpcode::send};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(sc[i].status, WcStatus::success) << i;
    EXPECT_EQ(sc[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(sc[i].opcode, want[i]);
    EXPECT_EQ(sc[i].byte_len, i == 5 ? 1u : 0u);
  }
  auto rc = poll_n(*p.b.rcq, 3);
  ASSERT_EQ(rc.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rc[i].status, WcStatus::success);
    EXPECT_EQ(rc[i].wr_id, uint64_t(500 + i));
    EXPECT_EQ(rc[i].opcode, WcOpcode::recv);
    EXPECT_EQ(rc[i].byte_len, i == 2 ? 1u : 0u);
  }
  EXPECT_EQ(p.b.buf[0], 0x42);
  for (int i = 1; i < 64; ++i) ASSERT_EQ(p.b.buf[i], kPoison) << "byte " << i;
}

INSTANTIATE_TEST_SUITE_P(Mtus, RcZeroLength,
                         ::testing::Values(Mtu::m256, Mtu::m512, Mtu::m1024, Mtu::m2048, Mtu::m4096),
                         [](const ::testing::TestParamInfo<Mtu>& i) {
                           return "Mtu" + std::to_string(mtu_bytes(i.param));
                         });

INSTANTIATE_TEST_SUITE_P(Mtus, RcSizes,
                         ::testing::Combine(::testing::Values(Mtu::m256, Mtu::m512, Mtu::m1024, Mtu::m2048, Mtu::m4096),
                                            ::testing::Values(Op::send, Op::write, Op::read)),
                         [](const ::testing::TestParamInfo<RcSizes::ParamType>& i) {
                           return std::string(op_name(std::get<1>(i.param))) +
                                  std::to_string(mtu_bytes(std::get<0>(i.param)));
                         });

}  // namespace
}  // namespace uroce::test
