// Test helpers for the public API: two contexts in this process (127.0.0.1
// and 127.0.0.2, ephemeral UDP ports), each with a PD, CQs, a registered
// buffer and a QP, connected to each other with QueuePair::connect().
// Uses <uroce/...> only.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "uroce/uroce.hpp"

namespace uroce::apitest {

using namespace std::chrono_literals;

// The value of a Result, or an exception (GoogleTest reports it as a
// failure of the test) naming what failed.
template <class T>
T must(Result<T> r, std::string_view what) {
  if (!r.ok()) throw std::runtime_error(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}
inline void must(const Status& s, std::string_view what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.to_string());
}

inline IpAddr ip(const char* text) {
  auto a = IpAddr::parse(text);
  if (!a) throw std::runtime_error(std::string("bad address ") + text);
  return *a;
}

inline DeviceInfo local_device(const char* addr, uint32_t mtu = 0) {
  DeviceInfo d;
  d.name = std::string("api-") + addr;
  d.gids = {ip(addr)};
  d.udp_port = 0;
  d.mtu = mtu;
  return d;
}

inline void fill(std::span<std::byte> b, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : b) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = std::byte(x);
  }
}

constexpr uint32_t kAllAccess =
    access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;

struct PairOptions {
  QpType type = QpType::rc;
  uint32_t mtu_a = 0, mtu_b = 0;  // device MTUs (0: from the interface)
  std::optional<Mtu> path_mtu{};  // ConnectOptions::mtu for both
  bool channel = false;           // completion channels on the CQs
  bool srq_b = false;             // B receives through an SRQ
  size_t buf_size = 1 << 20;
  uint32_t access = kAllAccess;  // MR access of both buffers
  uint32_t cqe = 256;
  bool connect = true;
  std::optional<FaultConfig> faults_a{}, faults_b{};  // DeviceInfo::faults
  std::optional<bool> shared_memory{};                // DeviceInfo::shared_memory of both
};

struct Side {
  std::optional<Context> ctx;
  std::optional<CompletionChannel> channel;
  std::optional<CompletionQueue> scq, rcq;
  std::optional<ProtectionDomain> pd;
  std::vector<std::byte> buf;
  std::optional<MemoryRegion> mr;
  std::optional<SharedReceiveQueue> srq;
  std::optional<QueuePair> qp;  // declared last: destroyed first

  uint64_t addr(size_t off = 0) const { return mr->addr() + off; }
  Sge sge(size_t off, uint32_t len) const { return mr->sge(off, len); }
  std::byte* at(size_t off) { return buf.data() + off; }
};

inline void open_side(Side& s, const DeviceInfo& dev, const PairOptions& o, bool srq) {
  s.ctx = must(Context::open(dev), "open " + dev.name);
  if (o.channel) s.channel = must(s.ctx->create_comp_channel(), "create_comp_channel");
  CompletionChannel* ch = s.channel ? &*s.channel : nullptr;
  s.scq = must(s.ctx->create_cq(o.cqe, ch), "create_cq (send)");
  s.rcq = must(s.ctx->create_cq(o.cqe, ch), "create_cq (recv)");
  s.pd = must(s.ctx->alloc_pd(), "alloc_pd");
  s.buf.assign(o.buf_size, std::byte{0});
  s.mr = must(s.pd->reg_mr(std::span<std::byte>(s.buf), o.access), "reg_mr");
  if (srq) s.srq = must(s.pd->create_srq({}), "create_srq");
  QpConfig qc;
  qc.type = o.type;
  qc.send_cq = &*s.scq;
  qc.recv_cq = &*s.rcq;
  qc.srq = s.srq ? &*s.srq : nullptr;
  s.qp = must(s.pd->create_qp(qc), "create_qp");
}

inline ConnectOptions connect_options(const PairOptions& o) {
  ConnectOptions c;
  c.mtu = o.path_mtu;
  c.min_rnr_timer = 1;  // 10 us: tests that provoke RNR NAKs stay quick
  return c;
}

struct Pair {
  explicit Pair(const PairOptions& o = {}) : opt(o) {
    DeviceInfo da = local_device("127.0.0.1", o.mtu_a), db = local_device("127.0.0.2", o.mtu_b);
    da.faults = o.faults_a;
    db.faults = o.faults_b;
    da.shared_memory = db.shared_memory = o.shared_memory;
    open_side(a, da, o, false);
    open_side(b, db, o, o.srq_b);
    if (o.connect) connect();
  }
  void connect() {
    const PeerInfo ia = a.qp->local_info(), ib = b.qp->local_info();
    must(a.qp->connect(ib, connect_options(opt)), "connect a");
    must(b.qp->connect(ia, connect_options(opt)), "connect b");
  }
  PairOptions opt;
  Side a, b;
};

// The next completion of `cq`, or an exception after `timeout`.
inline Wc wait_wc(CompletionQueue& cq, std::chrono::milliseconds timeout = 5000ms) {
  Wc wc;
  const int n = must(cq.poll_for(std::span<Wc>(&wc, 1), timeout), "poll");
  if (n != 1) throw std::runtime_error("no completion within " + std::to_string(timeout.count()) + " ms");
  return wc;
}

// Completions arriving within `window` (expects none further).
inline std::vector<Wc> drain(CompletionQueue& cq, std::chrono::milliseconds window) {
  std::vector<Wc> out;
  Wc wc[16];
  const auto end = std::chrono::steady_clock::now() + window;
  while (std::chrono::steady_clock::now() < end) {
    auto n = cq.poll(wc);
    if (!n.ok()) break;
    out.insert(out.end(), wc, wc + *n);
  }
  return out;
}

inline SendWr rdma(WrOpcode op, const Sge& local, uint64_t remote_addr, uint32_t rkey, uint64_t wr_id = 0) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {&local, 1};
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}
// The SendWr keeps a pointer to the Sge: no temporaries.
SendWr rdma(WrOpcode, const Sge&&, uint64_t, uint32_t, uint64_t = 0) = delete;

}  // namespace uroce::apitest
