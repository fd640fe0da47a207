// Test fixture: two device contexts in this process (127.0.0.1 and
// 127.0.0.2, ephemeral UDP ports found through the host registry), each with
// a PD, CQs, a registered buffer and a QP, connected to each other.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "verbs/ah.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"
#include "verbs/srq.hpp"

namespace uroce::test {

using namespace uroce::verbs;

struct PairOptions {
  QpType type = QpType::rc;
  Mtu mtu = Mtu::m1024;
  uint32_t psn_a = 0x10;      // A's send PSN (= B's receive PSN)
  uint32_t psn_b = 0x20;
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_sge = 4;
  uint32_t max_inline = 256;
  uint32_t cqe = 256;
  uint8_t timeout = 14;       // 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 0.01 ms
  uint8_t max_rd_atomic = 16;
  uint32_t access = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead |
                    access::kRemoteAtomic;
  size_t buf_size = 1 << 20;
  bool channel = false;       // completion channels on the CQs
  bool srq_b = false;         // B receives through an SRQ
  const char* addr_a = "127.0.0.1";
  const char* addr_b = "127.0.0.2";
  uint16_t udp_port = 0;      // 0: ephemeral ports (peers found through the host registry)
};

struct Side {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<CompChannel> ch;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Srq> srq;
  std::unique_ptr<Qp> qp;
  std::vector<uint8_t> buf;
  std::unique_ptr<Mr> mr;

  uint64_t addr(size_t off = 0) const { return uint64_t(uintptr_t(buf.data())) + off; }
  Sge sge(size_t off, uint32_t len) const { return Sge{addr(off), len, mr->lkey()}; }
  ~Side() {
    qp.reset();
    srq.reset();
    mr.reset();
    scq.reset();
    rcq.reset();
    ch.reset();
  }
};

inline std::unique_ptr<Mr> reg_mr(Pd& pd, void* p, size_t len, uint32_t acc) {
  auto r = Mr::reg(pd, uint64_t(uintptr_t(p)), len, uint64_t(uintptr_t(p)), acc);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

class Pair {
 public:
  explicit Pair(const PairOptions& o = {});
  ~Pair();
  Side a, b;
  PairOptions opt;

  // Connects a <-> b through RESET -> INIT -> RTR -> RTS.
  void connect();
  void open_side(Side& s, const char* addr, bool srq);
  Status to_init(Side& s);
  Status to_rtr(Side& s, const Side& peer, uint32_t rq_psn);
  Status to_rts(Side& s, uint32_t sq_psn);
};

// Polls until `n` completions arrived or `ms` passed; returns what arrived.
std::vector<Wc> poll_n(Cq& cq, size_t n, int ms = 5000);
// Polls for `ms` and returns everything (expects nothing further to come).
std::vector<Wc> drain(Cq& cq, int ms);

Status post_send(Qp& qp, const SendWr& wr);
Status post_recv(Qp& qp, uint64_t wr_id, std::vector<Sge> sges);

inline void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = uint8_t(x);
  }
}

}  // namespace uroce::test
