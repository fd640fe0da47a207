// The one-copy WRITE and READ between same-host peers
// (docs/one_copy_design.md, requester_copy.cpp, responder_copy.cpp): large
// RC WRITEs over shared memory go as UROCE_COPY_WRITE requests whose bytes
// the responder pulls with process_vm_readv, large READs as
// UROCE_COPY_READ requests it answers with process_vm_writev.  Checked
// here: the bytes, byte for byte, at sizes around the chunk and packet
// edges, through several SGEs; the counters that show which path carried
// them; the same completions and QP states as packets give when a key, the
// requester's or the responder's memory is bad; the fall-back to packets
// when the copy is refused; and that a request arriving by UDP moves
// nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loopback.hpp"
#include "support/roce_packet.hpp"
#include "wire/copy.hpp"
#include "wire/opcode.hpp"

namespace uroce::test {
namespace {

// Tests where memory faults under uroce's fault guard (the packets a
// refused copy falls back to, the probe of our own byte): TSan's signal
// interception does not hand such a fault to the guard (see
// rc_vanished_memory_test.cpp), so the plain and ASan builds check them.
#if defined(__SANITIZE_THREAD__)
#define SKIP_WHERE_FAULTS_ARE_NOT_GUARDED() GTEST_SKIP() << "fault recovery is not available under ThreadSanitizer"
#else
#define SKIP_WHERE_FAULTS_ARE_NOT_GUARDED() (void)0
#endif

constexpr size_t kBuf = (8u << 20) + 4096;
constexpr uint8_t kPoison = 0xa5;
constexpr size_t kGuard = 64;

PairOptions copy_options(Mtu mtu = Mtu::m4096, bool copy = true) {
  PairOptions o = over(PacketPath::shm);
  o.mtu = mtu;
  o.buf_size = kBuf;
  o.shm_copy = copy;
  return o;
}

// Orders our accesses to the buffers after the NICs' (see rc_sizes_test).
void sync_with(Pair& p) {
  { std::lock_guard g(p.a.ctx->nic().mu()); }
  { std::lock_guard g(p.b.ctx->nic().mu()); }
}

SendWr write_wr(uint64_t id, WrOpcode op, const Side& dst, size_t off) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = send_flags::kSignaled;
  wr.remote_addr = dst.addr(off);
  wr.rkey = dst.mr->rkey();
  return wr;
}

Status post_write(Qp& qp, SendWr wr, const std::vector<Sge>& sges) {
  wr.sg_list = sges;
  return post_send(qp, wr);
}

// Posts `wr` on A's QP and waits for its completion: its status (nullopt:
// not posted, or no completion within the wait).
std::optional<WcStatus> run_one(Pair& p, const SendWr& wr, const std::vector<Sge>& sges) {
  if (!post_write(*p.a.qp, wr, sges).ok()) return std::nullopt;
  const auto wc = poll_n(*p.a.scq, 1);
  if (wc.size() != 1 || wc[0].wr_id != wr.wr_id) return std::nullopt;
  return wc[0].status;
}

// 1 MiB of fresh memory filled with `fill`, registered in `pd` with
// `access`, then re-protected to `prot`: memory the application took away
// from under a registration.  Unregistered and unmapped at the end.
struct Revoked {
  static constexpr size_t kLen = 1u << 20;
  uint8_t* p = nullptr;
  std::unique_ptr<Mr> mr;
  Revoked(Pd& pd, uint32_t access, uint8_t fill, int prot) {
    void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    p = static_cast<uint8_t*>(m);
    std::memset(p, fill, kLen);
    mr = reg_mr(pd, p, kLen, access);
    if (mr && ::mprotect(p, kLen, prot) != 0) mr.reset();
  }
  ~Revoked() {
    mr.reset();
    if (p) ::munmap(p, kLen);
  }
  bool ok() const { return p && mr; }
  uint64_t addr() const { return uint64_t(uintptr_t(p)); }
};

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
class DupRingIo final : public net::PacketIo {
 public:
  explicit DupRingIo(std::unique_ptr<net::PacketIo> inner) : inner_(std::move(inner)) {}
  Endpoint local() const noexcept override { return inner_->local(); }
  uint16_t tx_ipv4_id() const noexcept override { return inner_->tx_ipv4_id(); }
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override {
    doubled_.clear();
    for (const net::TxPacket& x : pkts) {
      doubled_.push_back(x);
      doubled_.back().gso_segments = 0;
      doubled_.push_back(doubled_.back());
    }
    return inner_->send_batch(doubled_) / 2;
  }
  size_t recv_batch(std::span<net::RxPacket> out) noexcept override { return inner_->recv_batch(out); }
  int wait_fd() const noexcept override { return inner_->wait_fd(); }
  bool prepare_wait() noexcept override { return inner_->prepare_wait(); }
  void done_wait() noexcept override { inner_->done_wait(); }
  int max_sleep_ms() const noexcept override { return inner_->max_sleep_ms(); }
  size_t max_payload() const noexcept override { return inner_->max_payload(); }
  bool host_local(const IpAddr& dst) noexcept override { return inner_->host_local(dst); }
  bool ring_owner(const Endpoint& dst, uint32_t qpn, net::RingOwner& out) noexcept override {
    return inner_->ring_owner(dst, qpn, out);
  }
  void advertise(uint64_t caps) noexcept override { inner_->advertise(caps); }
  net::IoStats stats() const noexcept override { return inner_->stats(); }

 private:
  std::unique_ptr<net::PacketIo> inner_;
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
class StaleOwnerIo final : public net::PacketIo {
 public:
  explicit StaleOwnerIo(std::unique_ptr<net::PacketIo> inner) : inner_(std::move(inner)) {}
  Endpoint local() const noexcept override { return inner_->local(); }
  uint16_t tx_ipv4_id() const noexcept override { return inner_->tx_ipv4_id(); }
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override { return inner_->send_batch(pkts); }
  size_t recv_batch(std::span<net::RxPacket> out) noexcept override { return inner_->recv_batch(out); }
  int wait_fd() const noexcept override { return inner_->wait_fd(); }
  bool prepare_wait() noexcept override { return inner_->prepare_wait(); }
  void done_wait() noexcept override { inner_->done_wait(); }
  int max_sleep_ms() const noexcept override { return inner_->max_sleep_ms(); }
  size_t max_payload() const noexcept override { return inner_->max_payload(); }
  bool host_local(const IpAddr& dst) noexcept override { return inner_->host_local(dst); }
  bool ring_owner(const Endpoint& dst, uint32_t qpn, net::RingOwner& out) noexcept override {
    if (!inner_->ring_owner(dst, qpn, out)) return false;
    ++out.start;  // the pid now names another process
    return true;
  }
  void advertise(uint64_t caps) noexcept override { inner_->advertise(caps); }
  net::IoStats stats() const noexcept override { return inner_->stats(); }

 private:
  std::unique_ptr<net::PacketIo> inner_;
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
