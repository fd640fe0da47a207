// `uroce scale`: what many QPs and many memory regions cost one process
// (seed 004's QP-count scaling and registration cost).
//
//   QPs:  N RC QPs on each of two devices of this process, created, connected
//         pairwise (RESET -> RTS), each then used for one signaled WRITE whose
//         bytes are checked at the target, then destroyed: time per QP for each
//         step and resident memory per QP (RSS grown / 2N).
//   MRs:  M regions of one page each registered, then deregistered: time and
//         resident memory per region; then one region of each of several
//         sizes: registration time by size.
//
// A human table, or --json.  Bounded: every wait has a deadline.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include "bench_common.hpp"
#include "commands.hpp"

namespace uroce::scale {

namespace {

struct Options {
  uint32_t qps = 1024;
  uint32_t mrs = 10000;
  uint32_t send_wr = 128, recv_wr = 128;
  std::string addr = "127.0.0.1", peer_addr = "127.0.0.2";
  bool json = false;
};

uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

struct QpFigures {
  uint32_t n = 0;
  double create_us = 0, connect_us = 0, write_us = 0, destroy_us = 0;  // per QP
  double bytes_per_qp = 0;
};

struct MrFigures {
  uint32_t n = 0;
  double reg_us = 0, dereg_us = 0, bytes_per_mr = 0;
  std::vector<std::pair<uint64_t, double>> reg_us_by_size;  // one region of each size
};

struct Side {
  std::optional<Context> ctx;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionQueue> cq;
  std::vector<std::byte> buf;
  std::optional<MemoryRegion> mr;
  std::vector<QueuePair> qps;
};

Status open_side(Side& s, const std::string& addr, uint32_t cqe, size_t buf_bytes = 8 * 4096) {
  auto ip = IpAddr::parse(addr);
  if (!ip) return err::inval("not an address: " + addr);
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {*ip};
  dev.udp_port = 0;
  auto ctx = Context::open(dev);
  if (!ctx.ok()) return ctx.status();
  s.ctx = std::move(*ctx);
  auto pd = s.ctx->alloc_pd();
  if (!pd.ok()) return pd.status();
  s.pd = std::move(*pd);
  auto cq = s.ctx->create_cq(cqe);
  if (!cq.ok()) return cq.status();
  s.cq = std::move(*cq);
  s.buf.assign(buf_bytes, std::byte{0});
  auto mr = s.pd->reg_mr(s.buf, access::kLocalWrite | access::kRemoteWrite);
  if (!mr.ok()) return mr.status();
  s.mr = std::move(*mr);
  return {};
}

Status measure_qps(const Options& o, QpFigures& f) {
  f.n = o.qps;
  Side a, b;
  // A slot of 8 bytes per QP: no two QPs write the same bytes (WRITEs of
  // different QPs land in no particular order).
  const size_t buf = std::max<size_t>(8 * 4096, size_t(o.qps) * 8);
  UROCE_TRY(open_side(a, o.addr, o.qps + 64, buf));
  UROCE_TRY(open_side(b, o.peer_addr, 64, buf));
  a.qps.reserve(o.qps);
  b.qps.reserve(o.qps);
  const uint64_t rss0 = rss_bytes();
  double t = bench::now_us();
  for (Side* s : {&a, &b})
    for (uint32_t i = 0; i < o.qps; ++i) {
      QpConfig c;
      c.send_cq = &*s->cq;
      c.recv_cq = &*s->cq;
      c.cap = {o.send_wr, o.recv_wr, 1, 1, 64};
      auto qp = s->pd->create_qp(c);
      if (!qp.ok())
        return Status::error(qp.status().code(),
                             "QP " + std::to_string(s->qps.size()) + ": " + std::string(qp.status().message()));
      s->qps.push_back(std::move(*qp));
    }
  f.create_us = (bench::now_us() - t) / (2.0 * o.qps);
  t = bench::now_us();
  for (uint32_t i = 0; i < o.qps; ++i) {
    UROCE_TRY(a.qps[i].connect(b.qps[i].local_info()));
    UROCE_TRY(b.qps[i].connect(a.qps[i].local_info()));
  }
  f.connect_us = (bench::now_us() - t) / (2.0 * o.qps);

  // Each of A's QPs writes its index (8 bytes, inline) to its own slot of
  // B's buffer; all must complete and every slot hold its QP's index.
  const size_t slots = a.buf.size() / 8;
  t = bench::now_us();
  for (uint32_t i = 0; i < o.qps; ++i) {
    uint64_t v = i + 1;
    std::memcpy(a.buf.data() + (i % slots) * 8, &v, 8);
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::rdma_write;
    wr.send_flags = send_flags::kSignaled | send_flags::kInline;
    const Sge sge = a.mr->sge((i % slots) * 8, 8);
    wr.sg_list = {&sge, 1};
    wr.remote_addr = b.mr->addr() + (i % slots) * 8;
    wr.rkey = b.mr->rkey();
    UROCE_TRY(a.qps[i].post_send(wr));
  }
  std::vector<Wc> wc(256);
  uint32_t done = 0;
  const double deadline = bench::now_us() + 60e6;
  while (done < o.qps) {
    auto n = a.cq->poll(wc);
    if (!n.ok()) return n.status();
    for (int k = 0; k < *n; ++k)
      if (wc[size_t(k)].status != WcStatus::success)
        return err::io("WRITE on QP " + std::to_string(wc[size_t(k)].wr_id) + " completed with " +
                       to_string(wc[size_t(k)].status));
    done += uint32_t(*n);
    if (bench::now_us() > deadline) return err::io("WRITEs not complete after 60 s");
  }
  f.write_us = (bench::now_us() - t) / o.qps;
  if (std::memcmp(a.buf.data(), b.buf.data(), std::min<size_t>(slots, o.qps) * 8) != 0)
    return err::io("the bytes written are not at the target");
  f.bytes_per_qp = double(rss_bytes() - std::min(rss0, rss_bytes())) / (2.0 * o.qps);
  t = bench::now_us();
  a.qps.clear();
  b.qps.clear();
  f.destroy_us = (bench::now_us() - t) / (2.0 * o.qps);
  return {};
}

Status measure_mrs(const Options& o, MrFigures& f) {
  f.n = o.mrs;
  Side a;
  UROCE_TRY(open_side(a, o.addr, 64));
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  std::vector<std::byte> mem(size_t(o.mrs) * page + page);
  std::byte* base = mem.data() + (page - uintptr_t(mem.data()) % page) % page;
  std::vector<MemoryRegion> mrs;
  mrs.reserve(o.mrs);
  const uint64_t rss0 = rss_bytes();
  double t = bench::now_us();
  for (uint32_t i = 0; i < o.mrs; ++i) {
    auto mr = a.pd->reg_mr(base + size_t(i) * page, page, access::kLocalWrite | access::kRemoteWrite);
    if (!mr.ok())
      return Status::error(mr.status().code(), "MR " + std::to_string(i) + ": " + std::string(mr.status().message()));
    mrs.push_back(std::move(*mr));
  }
  f.reg_us = (bench::now_us() - t) / o.mrs;
  f.bytes_per_mr = double(rss_bytes() - std::min(rss0, rss_bytes())) / o.mrs;
  t = bench::now_us();
  mrs.clear();
  f.dereg_us = (bench::now_us() - t) / o.mrs;

  // Registration time by size: memory mapped, not touched (a NIC pins and
  // maps it; uroce only checks the mapping).
  for (uint64_t size : {uint64_t(4) << 10, uint64_t(1) << 20, uint64_t(64) << 20, uint64_t(1) << 30}) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) continue;
    std::vector<double> us;
    for (int k = 0; k < 5; ++k) {
      const double t0 = bench::now_us();
      auto mr = a.pd->reg_mr(p, size, access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead);
      const double t1 = bench::now_us();
      if (!mr.ok()) break;
      us.push_back(t1 - t0);
    }
    ::munmap(p, size);
    if (!us.empty()) f.reg_us_by_size.emplace_back(size, bench::summarize(us).median);
  }
  return {};
}

int run(const Options& o) {
  QpFigures q;
  MrFigures m;
  Status st = o.qps ? measure_qps(o, q) : Status{};
  if (st.ok() && o.mrs) st = measure_mrs(o, m);
  if (o.json) {
    bench::Json j;
    j.begin_object().field("ok", st.ok());
    if (!st.ok()) j.field("error", st.to_string());
    j.key("qps").begin_object().field("n", q.n).field("send_wr", o.send_wr).field("recv_wr", o.recv_wr);
    j.field("create_us", q.create_us).field("connect_us", q.connect_us).field("write_us", q.write_us);
    j.field("destroy_us", q.destroy_us).field("bytes_per_qp", q.bytes_per_qp).end_object();
    j.key("mrs").begin_object().field("n", m.n).field("reg_us", m.reg_us).field("dereg_us", m.dereg_us);
    j.field("bytes_per_mr", m.bytes_per_mr).key("reg_us_by_size").begin_array();
    for (auto [size, us] : m.reg_us_by_size) j.begin_object().field("size", size).field("us", us).end_object();
    j.end_array().end_object().end_object();
    std::printf("%s\n", j.str().c_str());
    return st.ok() ? 0 : 1;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "uroce scale: %s\n", st.to_string().c_str());
    return 1;
  }
  if (o.qps) {
    std::printf("%u RC QPs on each of two devices (%u send / %u recv WRs each), per QP:\n", q.n, o.send_wr, o.recv_wr);
    std::printf("  create %s us, connect (RESET -> RTS) %s us, first WRITE %s us, destroy %s us; %s KiB resident\n",
                bench::fmt(q.create_us, 2).c_str(), bench::fmt(q.connect_us, 2).c_str(),
                bench::fmt(q.write_us, 2).c_str(), bench::fmt(q.destroy_us, 2).c_str(),
                bench::fmt(q.bytes_per_qp / 1024, 2).c_str());
  }
  if (o.mrs) {
    std::printf("%u MRs of one page, per MR: register %s us, deregister %s us; %s bytes resident\n", m.n,
                bench::fmt(m.reg_us, 2).c_str(), bench::fmt(m.dereg_us, 2).c_str(),
                bench::fmt(m.bytes_per_mr, 0).c_str());
    std::printf("registering one region (untouched memory):");
    for (auto [size, us] : m.reg_us_by_size)
      std::printf("  %s %s us", bench::size_name(size).c_str(), bench::fmt(us, 1).c_str());
    std::printf("\n");
  }
  return 0;
}

}  // namespace

}  // namespace uroce::scale

namespace uroce::cli {

Command add_scale(CLI::App& root) {
  static scale::Options o;
  Command c;
  c.app = root.add_subcommand("scale",
                              "What many QPs and many memory regions cost one process: time and resident memory per "
                              "RC QP (created, connected, used once) and per MR");
  c.app->add_option("--qps", o.qps, "RC QPs on each of two devices (0: skip)")
      ->check(CLI::Range(0u, 30000u))
      ->capture_default_str();
  c.app->add_option("--mrs", o.mrs, "one-page MRs (0: skip)")->check(CLI::Range(0u, 60000u))->capture_default_str();
  c.app->add_option("--send-wr", o.send_wr, "send queue depth of each QP")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  c.app->add_option("--recv-wr", o.recv_wr, "receive queue depth of each QP")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  c.app->add_option("--addr", o.addr, "one device's address")->capture_default_str();
  c.app->add_option("--peer-addr", o.peer_addr, "the other device's address")->capture_default_str();
  c.app->add_flag("--json", o.json, "print the results as JSON");
  c.run = [] { return scale::run(o); };
  return c;
}

}  // namespace uroce::cli
