// The consumer of an installed uroce (tests/install): two devices of this
// host, an RC queue pair on each, and RDMA WRITEs from one into the other's
// registered memory, checked byte for byte.
//
//   consumer [ADDR_A ADDR_B]     (default 127.0.81.3 127.0.81.4)
//
// Prints "consumer: ok ..." and exits 0 on success, else says what failed
// and exits 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <uroce/uroce.hpp>
#include <vector>

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T get(uroce::Result<T> r, const char* what) {
  if (!r.ok()) fail(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

void check(const uroce::Status& s, const char* what) {
  if (!s.ok()) fail(std::string(what) + ": " + s.to_string());
}

uroce::IpAddr address(const char* text) {
  auto a = uroce::IpAddr::parse(text);
  if (!a) fail(std::string("not an IP address: ") + text);
  return *a;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace uroce;
  const char* addr_a = argc > 2 ? argv[1] : "127.0.81.3";
  const char* addr_b = argc > 2 ? argv[2] : "127.0.81.4";

  Context a = get(Context::open({.name = "writer", .gids = {address(addr_a)}, .udp_port = 0}), "open A");
  Context b = get(Context::open({.name = "target", .gids = {address(addr_b)}, .udp_port = 0}), "open B");
  CompletionQueue cq_a = get(a.create_cq(8), "CQ of A");
  CompletionQueue cq_b = get(b.create_cq(8), "CQ of B");
  ProtectionDomain pd_a = get(a.alloc_pd(), "PD of A");
  ProtectionDomain pd_b = get(b.alloc_pd(), "PD of B");

  // A's source: a pattern no two neighbouring bytes share; B's target: zeros.
  std::vector<unsigned char> src(8192), dst(8192, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>((i * 7 + 3) ^ (i >> 8));
  MemoryRegion mr_src = get(pd_a.reg_mr(src.data(), src.size(), access::kLocalWrite), "reg_mr on A");
  MemoryRegion mr_dst =
      get(pd_b.reg_mr(dst.data(), dst.size(), access::kLocalWrite | access::kRemoteWrite), "reg_mr on B");

  QueuePair qp_a = get(pd_a.create_qp({.type = QpType::rc, .send_cq = &cq_a, .recv_cq = &cq_a}), "QP of A");
  QueuePair qp_b = get(pd_b.create_qp({.type = QpType::rc, .send_cq = &cq_b, .recv_cq = &cq_b}), "QP of B");
  check(qp_a.connect(qp_b.local_info()), "connect A");
  check(qp_b.connect(qp_a.local_info()), "connect B");

  // Three WRITEs: a few bytes, one spanning several MTU-sized packets, and
  // one at an odd offset; [src_off, len) of A lands at dst_off of B.
  struct Piece {
    size_t src_off, dst_off;
    uint32_t len;
  };
  const Piece pieces[] = {{0, 0, 13}, {100, 1000, 5000}, {6001, 6501, 777}};
  std::vector<unsigned char> expect(dst.size(), 0);
  uint64_t wr_id = 0;
  for (const Piece& p : pieces) {
    ++wr_id;
    Sge sge = mr_src.sge(p.src_off, p.len);
    check(qp_a.post_send({.wr_id = wr_id,
                          .opcode = WrOpcode::rdma_write,
                          .send_flags = send_flags::kSignaled,
                          .sg_list = {&sge, 1},
                          .remote_addr = mr_dst.addr() + p.dst_off,
                          .rkey = mr_dst.rkey()}),
          "post RDMA WRITE");
    Wc wc;
    const int n = get(cq_a.poll_for({&wc, 1}, std::chrono::seconds(10)), "poll");
    if (n != 1) fail("no completion within 10 s for WRITE " + std::to_string(wr_id));
    if (wc.status != WcStatus::success || wc.opcode != WcOpcode::rdma_write || wc.wr_id != wr_id)
      fail(std::string("WRITE ") + std::to_string(wr_id) + " completed with " + to_string(wc.status));
    std::memcpy(expect.data() + p.dst_off, src.data() + p.src_off, p.len);
  }

  // B's memory holds exactly the three pieces and zeros elsewhere.
  for (size_t i = 0; i < dst.size(); ++i)
    if (dst[i] != expect[i])
      fail("byte " + std::to_string(i) + " of B's buffer is " + std::to_string(dst[i]) + ", expected " +
           std::to_string(expect[i]));
  // Nothing arrived on B's CQ: a WRITE consumes no receive.
  Wc stray;
  if (get(cq_b.poll({&stray, 1}), "poll B") != 0) fail("B's CQ got a completion");

  std::printf("consumer: ok, %zu RDMA WRITEs from %s to %s byte-exact (uroce %s)\n", std::size(pieces), addr_a, addr_b,
              version());
  return 0;
}
