// The passive side of `uroce demo` (started by the active side with the
// socket pair as --peer-fd).  It sets up a QP and memory, says hello,
// connects, posts one receive buffer and then only answers the active
// side's questions: everything else (ACKs, READ responses, atomics) is its
// NIC's work, done by the NIC's progress thread while this thread sleeps.
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <optional>

#include "demo_common.hpp"

namespace uroce::demo {
namespace {

constexpr const char* kReadText = "The passive's memory, fetched by an RDMA READ. ";
constexpr uint64_t kCounterStart = 1000;

// The peer's RDMA WRITEs and atomics were carried out by our NIC's progress
// thread.  We learnt of them through the socket, which the C++ memory model
// does not count as synchronising with that thread: polling a CQ does (it
// takes the NIC's lock), so this thread then sees every byte the NIC wrote.
void see_nic_writes(CompletionQueue& cq) { (void)cq.poll({}); }

}  // namespace

int run_passive(const Options& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Link link(o.peer_fd);
  auto fail = [&](const std::string& what) {
    say("passive", "error: %s", what.c_str());
    (void)link.send("error " + what);
    return 1;
  };
  const Layout L(o.size);
  const uint32_t n = uint32_t(o.size);

  auto addr = IpAddr::parse(o.addr);
  if (!addr) return fail("bad --addr " + o.addr);
  DeviceInfo dev;
  dev.name = "uroce0";
  dev.gids = {*addr};
  dev.udp_port = 4791;
  auto ctx_r = Context::open(dev);
  if (!ctx_r.ok()) return fail("open the device: " + ctx_r.status().to_string());
  std::optional<Context> ctx = std::move(*ctx_r);
  auto ch_r = ctx->create_comp_channel();
  if (!ch_r.ok()) return fail("completion channel: " + ch_r.status().to_string());
  std::optional<CompletionChannel> channel = std::move(*ch_r);
  auto scq_r = ctx->create_cq(16);
  auto rcq_r = ctx->create_cq(16, &*channel);
  auto pd_r = ctx->alloc_pd();
  if (!scq_r.ok() || !rcq_r.ok() || !pd_r.ok()) return fail("create CQs and a PD");
  std::optional<CompletionQueue> scq = std::move(*scq_r), rcq = std::move(*rcq_r);
  std::optional<ProtectionDomain> pd = std::move(*pd_r);
  Buffer buf(L.total());
  if (!buf.data) return fail("out of memory");
  auto mr_r = pd->reg_mr(buf.data, buf.size,
                         access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
  if (!mr_r.ok()) return fail("register memory: " + mr_r.status().to_string());
  std::optional<MemoryRegion> mr = std::move(*mr_r);
  QpConfig qc;
  qc.type = QpType::rc;
  qc.send_cq = &*scq;
  qc.recv_cq = &*rcq;
  qc.cap = QpCap{16, 16, 1, 1, 64};
  auto qp_r = pd->create_qp(qc);
  if (!qp_r.ok()) return fail("create a queue pair: " + qp_r.status().to_string());
  std::optional<QueuePair> qp = std::move(*qp_r);

  fill_text(buf.span(L.read(), n), kReadText);
  uint64_t counter = kCounterStart;
  std::memcpy(buf.data + L.counter(), &counter, 8);
  const uint64_t read_hash = fnv1a(buf.span(L.read(), n));
  const PeerInfo me = qp->local_info();
  const Endpoint ep = ctx->local_endpoint();
  say("passive", "pid %d: device %s speaks RoCEv2 on %s", int(::getpid()), ctx->name().c_str(), ep.to_string().c_str());
  if (ep.port == 4791) {
    say("passive", "  (the active process receives on UDP 4791 of this address too: both share the port,");
    say("passive", "   and each datagram reaches the process whose QP it is for)");
  } else {
    say("passive", "  (UDP 4791 is not shared here: peers on this host find port %u", ep.port);
    say("passive", "   through the host registry)");
  }
  say("passive", "registered %s at %s for REMOTE WRITE, READ and ATOMIC: rkey %s",
      std::to_string(buf.size).append(" bytes").c_str(), hex(mr->addr()).c_str(), hex(mr->rkey(), 8).c_str());
  say("passive", "created RC queue pair %s, first PSN %s", hex(me.qpn, 6).c_str(), hex(me.psn, 6).c_str());
  say("passive", "filled %u bytes for the active side to READ, set a counter to %" PRIu64, n, kCounterStart);
  auto kv = to_kv(me);
  kv["addr"] = hex(mr->addr());
  kv["rkey"] = hex(mr->rkey());
  kv["read_hash"] = hex(read_hash);
  if (!link.send("hello", kv).ok()) return 1;

  for (;;) {
    auto m = link.recv(60000);
    if (!m.ok()) {
      say("passive", "error: %s", m.status().to_string().c_str());
      return 1;
    }
    const std::string& v = m->verb;
    if (v == "connect") {
      const PeerInfo them = peer_from(*m);
      ConnectOptions co;
      auto mtu = mtu_from_bytes(them.mtu);
      if (!mtu.ok()) return fail(mtu.status().to_string());
      co.mtu = *mtu;
      if (Status s = qp->connect(them, co); !s.ok()) return fail(s.to_string());
      Sge sge = mr->sge(L.send(), n);
      if (Status s = qp->post_recv(RecvWr{1, {&sge, 1}}); !s.ok()) return fail(s.to_string());
      if (Status s = rcq->req_notify(); !s.ok()) return fail(s.to_string());
      say("passive", "queue pair %s is in %s; posted a %u-byte receive buffer (wr_id 1)", hex(me.qpn, 6).c_str(),
          to_string(qp->state()), n);
      (void)link.send("ready");
    } else if (v == "show-recv") {
      // Armed with req_notify() at connect: the completion raised an event.
      auto cq = channel->get_event(10000);
      if (!cq.ok()) return fail("waiting for the receive: " + cq.status().to_string());
      Wc wc;
      auto got = (*cq)->poll(std::span<Wc>(&wc, 1));
      (*cq)->ack_events(1);
      if (!got.ok() || *got != 1) return fail("the completion event came without a completion");
      say("passive", "woke up on the completion channel; RECV completion: %s, wr_id %" PRIu64 ", from QP %s",
          describe(wc).c_str(), wc.wr_id, hex(wc.src_qp, 6).c_str());
      const auto bytes = buf.span(L.send(), wc.byte_len);
      say("passive", "received %s (fnv1a %s)", preview(bytes).c_str(), hex(fnv1a(bytes)).c_str());
      (void)link.send("recv", {{"status", std::to_string(uint32_t(wc.status))},
                               {"len", std::to_string(wc.byte_len)},
                               {"hash", hex(fnv1a(bytes))}});
    } else if (v == "check-write") {
      see_nic_writes(*scq);
      const auto bytes = buf.span(L.write(), n);
      const uint64_t h = fnv1a(bytes);
      say("passive", "no completion here: the WRITE did not involve this program");
      say("passive", "my memory at %s now holds %s", hex(mr->addr() + L.write()).c_str(), preview(bytes).c_str());
      say("passive", "fingerprint fnv1a %s, the active side's is %s: %s", hex(h).c_str(), m->str("hash").c_str(),
          h == m->num("hash") ? "the same" : "DIFFERENT");
      (void)link.send("write", {{"hash", hex(h)}});
    } else if (v == "note-read") {
      auto sent = ctx->counter("resp_read_packets");
      say("passive", "my NIC answered the READs by itself: %" PRIu64 " READ response packets so far",
          sent.ok() ? *sent : 0);
      (void)link.send("noted");
    } else if (v == "show-counter") {
      see_nic_writes(*scq);
      uint64_t now;
      std::memcpy(&now, buf.data + L.counter(), 8);
      say("passive", "my counter is now %" PRIu64 " (it was %" PRIu64 ")", now, kCounterStart);
      (void)link.send("counter", {{"value", std::to_string(now)}});
    } else if (v == "counters") {
      std::map<std::string, std::string> all;
      for (const Counter& c : ctx->counters()) all[c.name] = std::to_string(c.value);
      (void)link.send("counters", all);
    } else if (v == "bye") {
      qp.reset();
      mr.reset();
      pd.reset();
      rcq.reset();
      scq.reset();
      channel.reset();
      ctx.reset();
      say("passive", "destroyed QP, memory region, PD, CQs, channel and context; exiting");
      (void)link.send("bye");
      return 0;
    } else {
      return fail("unknown request '" + v + "'");
    }
  }
}

}  // namespace uroce::demo
