// The example of the README, built and run by the test suite.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <uroce/uroce.hpp>

using namespace uroce;

template <class T>
T must(Result<T> r) {  // the value, or exit with the error
  if (!r.ok()) std::fprintf(stderr, "%s\n", r.status().to_string().c_str()), std::exit(1);
  return std::move(r).value();
}
void must(const Status& s) {
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.to_string().c_str()), std::exit(1);
}

int main() {
  // Two devices of this host (two processes or hosts in real life).
  Context a = must(Context::open({.name = "a", .gids = {*IpAddr::parse("127.0.0.1")}, .udp_port = 0}));
  Context b = must(Context::open({.name = "b", .gids = {*IpAddr::parse("127.0.0.2")}, .udp_port = 0}));
  CompletionQueue cq_a = must(a.create_cq(16)), cq_b = must(b.create_cq(16));
  ProtectionDomain pd_a = must(a.alloc_pd()), pd_b = must(b.alloc_pd());

  char src[64] = "hello over RoCEv2", dst[64] = {};
  MemoryRegion mr_a = must(pd_a.reg_mr(src, sizeof src, access::kLocalWrite));
  MemoryRegion mr_b = must(pd_b.reg_mr(dst, sizeof dst, access::kLocalWrite | access::kRemoteWrite));

  QueuePair qp_a = must(pd_a.create_qp({.type = QpType::rc, .send_cq = &cq_a, .recv_cq = &cq_a}));
  QueuePair qp_b = must(pd_b.create_qp({.type = QpType::rc, .send_cq = &cq_b, .recv_cq = &cq_b}));
  // Each side needs the other's GID, QP number and first PSN (a socket
  // usually carries them), then walks RESET -> INIT -> RTR -> RTS.
  must(qp_a.connect(qp_b.local_info()));
  must(qp_b.connect(qp_a.local_info()));

  // RDMA WRITE: A puts bytes into B's memory knowing its address and rkey;
  // no code of B's runs (its NIC's progress thread does the work).
  Sge sge = mr_a.sge(0, sizeof src);
  must(qp_a.post_send({.wr_id = 1,
                       .opcode = WrOpcode::rdma_write,
                       .send_flags = send_flags::kSignaled,
                       .sg_list = {&sge, 1},
                       .remote_addr = mr_b.addr(),
                       .rkey = mr_b.rkey()}));
  Wc wc;
  while (must(cq_a.poll({&wc, 1})) == 0) {
  }
  std::printf("%s; B's buffer says \"%s\"\n", to_string(wc.status), dst);
  return wc.status == WcStatus::success && std::strcmp(src, dst) == 0 ? 0 : 1;
}
