// Helpers for tests on a FakeNetwork: decoding what went over the wire and
// filters that drop chosen packets deterministically.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "loopback.hpp"
#include "net/fake_io.hpp"
#include "net/fault_io.hpp"
#include "wire/packet.hpp"

namespace uroce::test {

// The headers of one recorded/filtered packet (payload length, not bytes).
struct WirePkt {
  bool ok = false;
  Endpoint src, dst;
  wire::Headers hdr;
  uint32_t flags = 0;  // wire::op::k*
  size_t payload = 0;
  bool joined = false;  // it left in the GSO train of the packet before it
  uint64_t batch = 0;   // the send_batch call it left in (FakePacket::batch)
  uint8_t opcode() const { return hdr.bth.opcode; }
  uint32_t psn() const { return hdr.bth.psn; }
};

inline WirePkt decode_pkt(const net::FakePacket& fp) {
  WirePkt w;
  wire::Packet p;
  wire::DecodeError e;
  w.src = fp.src;
  w.dst = fp.dst;
  w.joined = fp.joined;
  w.batch = fp.batch;
  if (!wire::decode(fp.data, p, e)) return w;
  w.ok = true;
  w.hdr = p.hdr;
  w.flags = p.info->flags;
  w.payload = p.payload.size();
  return w;
}

inline std::vector<WirePkt> decode_all(const std::vector<net::FakePacket>& v) {
  std::vector<WirePkt> out;
  for (const auto& fp : v) out.push_back(decode_pkt(fp));
  return out;
}

// A filter that drops the packets for which `pred` says so; `pred` sees each
// decoded packet and may keep state (it runs under the hub's lock, one at a
// time).  Counts what it dropped.
struct DropFilter {
  std::shared_ptr<std::atomic<int>> dropped = std::make_shared<std::atomic<int>>(0);
  net::FakeNetwork::Filter make(std::function<bool(const WirePkt&)> pred) const {
    auto d = dropped;
    return [d, pred](net::FakePacket& fp) mutable {
      if (pred(decode_pkt(fp))) {
        ++*d;
        return false;
      }
      return true;
    };
  }
};

// Go-back-N: B's responder keeps nothing after a lost packet (as rdma_rxe
// and NICs); A's requester tries selective repeat or not.
inline PairOptions go_back_n(bool requester_sr = false, PairOptions o = {}) {
  transport::CongestionConfig off;
  off.selective_repeat = false;
  transport::CongestionConfig a = off;
  a.selective_repeat = requester_sr;
  o.congestion = a;
  o.congestion_b = off;
  return o;
}

// A Pair on a FakeNetwork of its own (o.fake, if set: one set up before the
// NICs attach), with helpers to drop chosen packets.
struct Fake {
  std::shared_ptr<net::FakeNetwork> net;
  std::unique_ptr<Pair> p;
  Endpoint a_ep, b_ep;
  explicit Fake(PairOptions o = {}) : net(o.fake ? o.fake : net::FakeNetwork::create()) {
    o.fake = net;
    p = std::make_unique<Pair>(o);
    a_ep = p->a.endpoint();
    b_ep = p->b.endpoint();
  }
  // Drops the packets `pred` picks (it sees each decoded packet, in order).
  void drop_if(std::function<bool(const WirePkt&)> pred) { net->set_filter(DropFilter{}.make(std::move(pred))); }
  // Drops the packets from `from` with all of `flags` whose PSN, counted
  // from A's first, is in `lost`: each once for every time it is listed.
  void lose_psns(Endpoint from, uint32_t flags, std::vector<uint32_t> lost) {
    const uint32_t base = p->opt.psn_a;
    auto left = std::make_shared<std::vector<uint32_t>>(std::move(lost));
    drop_if([=](const WirePkt& w) {
      if (w.src != from || (w.flags & flags) != flags) return false;
      auto it = std::find(left->begin(), left->end(), w.psn() - base);
      if (it == left->end()) return false;
      left->erase(it);
      return true;
    });
  }
  // Drops the n-th (1-based) packet from `from` that has all of `flags`.
  void drop_nth(Endpoint from, uint32_t flags, int n) {
    auto seen = std::make_shared<int>(0);
    drop_if([=](const WirePkt& w) { return w.src == from && (w.flags & flags) == flags && ++*seen == n; });
  }
};

// PairOptions::wrap for FaultIo dropping `rate` of each NIC's packets, with
// a seed from the NIC's address (plus `seed`): the same drops every run.
inline auto random_drops(double rate, uint64_t seed = 0) {
  return [rate, seed](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    FaultConfig fc;
    fc.seed = uint64_t(io->local().addr.bytes()[15]) + seed;
    fc.tx.drop = rate;
    return std::move(net::FaultIo::wrap(std::move(io), fc).value());
  };
}

inline SendWr make_wr(uint64_t id, WrOpcode opc, const Sge* sge, uint64_t raddr = 0, uint32_t rkey = 0) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = opc;
  wr.send_flags = send_flags::kSignaled;
  if (sge) wr.sg_list = {sge, 1};
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  return wr;
}

inline void expect_one(Cq& cq, uint64_t id, WcOpcode opc, uint32_t len, int ms = 5000) {
  auto wc = poll_n(cq, 1, ms);
  ASSERT_EQ(wc.size(), 1u) << "no completion for wr_id " << id;
  EXPECT_EQ(wc[0].status, WcStatus::success) << to_string(wc[0].status);
  EXPECT_EQ(wc[0].wr_id, id);
  EXPECT_EQ(wc[0].opcode, opc);
  EXPECT_EQ(wc[0].byte_len, len);
}

// A 10 KiB SEND from A to B, checked: both completions, every byte.
inline void send_10k(Pair& p, uint64_t id) {
  fill_pattern(p.a.buf.data(), 10 * 1024, uint32_t(id));
  ASSERT_TRUE(post_recv(*p.b.qp, id, {p.b.sge(0, 16384)}).ok());
  Sge sge = p.a.sge(0, 10 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(id, WrOpcode::send, &sge)).ok());
  expect_one(*p.a.scq, id, WcOpcode::send, 10 * 1024);
  expect_one(*p.b.rcq, id, WcOpcode::recv, 10 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 10 * 1024), -1);
}

// A 6 KiB SEND (six packets at MTU 1024) from A whose packets reach B in
// reverse order; both completions checked, the bytes compared.
inline void send_reversed(Fake& f) {
  Pair& p = *f.p;
  fill_pattern(p.a.buf.data(), 6 * 1024, 8);
  ASSERT_TRUE(post_recv(*p.b.qp, 7, {p.b.sge(0, 8192)}).ok());
  ASSERT_TRUE(f.net->hold(f.b_ep, true));
  Sge sge = p.a.sge(0, 6 * 1024);
  ASSERT_TRUE(post_send(*p.a.qp, make_wr(1, WrOpcode::send, &sge)).ok());
  ASSERT_TRUE(wait_until([&] { return f.net->queued(f.b_ep) == 6; }));
  ASSERT_TRUE(f.net->reverse(f.b_ep));
  ASSERT_TRUE(f.net->hold(f.b_ep, false));
  expect_one(*p.a.scq, 1, WcOpcode::send, 6 * 1024);
  expect_one(*p.b.rcq, 7, WcOpcode::recv, 6 * 1024);
  EXPECT_EQ(first_diff(p.a.buf.data(), p.b.buf.data(), 6 * 1024), -1);
}

}  // namespace uroce::test
