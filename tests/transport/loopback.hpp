// Test fixture: two device contexts in this process (127.0.0.1 and
// 127.0.0.2, ephemeral UDP ports found through the host registry), each with
// a PD, CQs, a registered buffer and a QP, connected to each other.
//
// With PairOptions::fake set, both contexts use FakeIo endpoints of that
// FakeNetwork instead of UDP sockets (default addresses 10.0.0.1/10.0.0.2 so
// they never collide with a UDP device's registry binding); `wrap` can put a
// decorator (e.g. DupIo) around each side's packet I/O.
//
// over(PacketPath) gives the options of one packet path -- UDP sockets, the
// in-memory FakeNetwork, or shared-memory rings (ShmIo, in a private
// directory) -- so one suite runs over each (TEST_P with kEveryPacketPath).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <thread>
#include <vector>

#include "net/fake_io.hpp"
#include "transport/counters.hpp"
#include "transport/nic.hpp"
#include "verbs/ah.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"
#include "verbs/srq.hpp"

namespace uroce::verbs {
// Readable gtest output for the enums the tests compare.
inline void PrintTo(WcStatus s, std::ostream* os) { *os << to_string(s) << " (" << int(s) << ")"; }
inline void PrintTo(QpState s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(WcOpcode o, std::ostream* os) { *os << "WcOpcode(" << int(o) << ")"; }
}  // namespace uroce::verbs

namespace uroce::test {

using namespace uroce::verbs;
using transport::Counters;

using IoWrap = std::function<std::unique_ptr<net::PacketIo>(std::unique_ptr<net::PacketIo>)>;

enum class PacketPath { udp, fake, shm };
const char* to_string(PacketPath p) noexcept;
inline void PrintTo(PacketPath p, std::ostream* os) { *os << to_string(p); }

// A directory of ring files for a Pair over shared memory, removed with it.
class ShmDir {
 public:
  ShmDir();
  ~ShmDir();
  ShmDir(const ShmDir&) = delete;
  ShmDir& operator=(const ShmDir&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

struct PairOptions {
  QpType type = QpType::rc;
  Mtu mtu = Mtu::m1024;
  uint32_t psn_a = 0x10;  // A's send PSN (= B's receive PSN)
  uint32_t psn_b = 0x20;
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_sge = 4;
  uint32_t max_inline = 256;
  uint32_t cqe = 256;
  uint8_t timeout = 14;  // 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 0.01 ms
  uint8_t max_rd_atomic = 16;
  uint32_t access = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  uint32_t qp_access = ~0u;    // QP access flags; ~0u: `access` without LOCAL_WRITE
  uint32_t qkey = 0x11111111;  // UD
  size_t buf_size = 1 << 20;
  bool channel = false;  // completion channels on the CQs
  bool srq_b = false;    // B receives through an SRQ
  bool sq_sig_all = false;
  bool connect = true;           // bring both QPs to RTS
  uint32_t device_mtu = 0;       // DeviceConfig::mtu (0: derived)
  const char* addr_a = nullptr;  // default 127.0.0.1 (fake: 10.0.0.1)
  const char* addr_b = nullptr;  // default 127.0.0.2 (fake: 10.0.0.2)
  uint16_t udp_port = 0;         // 0: ephemeral ports (peers found through the host registry)
  std::shared_ptr<net::FakeNetwork> fake;
  IoWrap wrap;
  std::shared_ptr<ShmDir> shm;                              // both sides' packets through rings in this directory
  bool shm_copy = false;                                    // one-copy WRITEs (DeviceConfig::shm_copy)
  std::optional<bool> shm_copy_b;                           // B's, if not `shm_copy`
  IoWrap wrap_a, wrap_b;                                    // shm: a decorator around one side's packet I/O
  std::optional<transport::CongestionConfig> congestion;    // unset: UROCE_CC decides
  std::optional<transport::CongestionConfig> congestion_b;  // B's, if not `congestion`
  std::optional<FaultConfig> faults_b;                      // B's device only (e.g. rx.ce: a congested switch)
};

// Default options over packet path `path`.
PairOptions over(PacketPath path, PairOptions o = {});
// Every path, for INSTANTIATE_TEST_SUITE_P(..., kEveryPacketPath, PacketPathName).
inline const auto kEveryPacketPath = ::testing::Values(PacketPath::udp, PacketPath::fake, PacketPath::shm);
inline std::string PacketPathName(const ::testing::TestParamInfo<PacketPath>& i) { return to_string(i.param); }

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
  IpAddr gid() const { return ctx->config().gids[0]; }
  Endpoint endpoint() const { return ctx->nic().local(); }
  // A consistent copy of this side's NIC counters.
  Counters counters() const {
    std::lock_guard g(ctx->nic().mu());
    return ctx->nic().snapshot();
  }
  // Destroys everything (the peer is gone).
  void destroy() {
    qp.reset();
    srq.reset();
    mr.reset();
    scq.reset();
    rcq.reset();
    ch.reset();
    pd.reset();
    ctx.reset();
  }
  ~Side() { destroy(); }
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
  PairOptions opt;
  Side a, b;

  // Connects a <-> b through RESET -> INIT -> RTR -> RTS.
  void connect();
  void open_side(Side& s, const char* addr, bool srq);
  // A further QP on side `s` (its CQs unless given), in RESET.
  std::unique_ptr<Qp> create_qp(Side& s, Cq* scq = nullptr, Cq* rcq = nullptr, Srq* srq = nullptr);
  Status to_init(Qp& qp);
  Status to_rtr(Qp& qp, uint32_t dest_qpn, const IpAddr& dgid, uint32_t rq_psn);
  Status to_rts(Qp& qp, uint32_t sq_psn);
  // RESET -> RTS of qp (on `side`) towards peer_qp (on `peer`).
  void connect_qp(Qp& qp, Qp& peer_qp, const Side& peer, uint32_t rq_psn, uint32_t sq_psn);
  Status to_init(Side& s) { return to_init(*s.qp); }
  Status to_rtr(Side& s, const Side& peer, uint32_t rq_psn) {
    return to_rtr(*s.qp, peer.qp->qpn(), peer.gid(), rq_psn);
  }
  Status to_rts(Side& s, uint32_t sq_psn) { return to_rts(*s.qp, sq_psn); }
};

// Polls until `n` completions arrived or `ms` passed; returns what arrived.
std::vector<Wc> poll_n(Cq& cq, size_t n, int ms = 5000);
// Polls for `ms` and returns everything (expects nothing further to come).
std::vector<Wc> drain(Cq& cq, int ms);
// Polls `pred` (yielding) until true or `ms` passed; returns its last value.
bool wait_until(const std::function<bool()>& pred, int ms = 5000);

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

// Index of the first differing byte, or -1 when equal (keeps failure output short).
inline long first_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return -1;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return long(i);
  return -1;
}

// Wraps a PacketIo and sends every packet twice, back to back.
class DupIo final : public net::PacketIo {
 public:
  explicit DupIo(std::unique_ptr<net::PacketIo> inner) : inner_(std::move(inner)) {}
  Endpoint local() const noexcept override { return inner_->local(); }
  size_t send_batch(std::span<const net::TxPacket> pkts) noexcept override {
    doubled_.clear();
    for (const auto& p : pkts) {
      doubled_.push_back(p);
      doubled_.push_back(p);
    }
    return inner_->send_batch(doubled_) / 2;
  }
  size_t recv_batch(std::span<net::RxPacket> out) noexcept override { return inner_->recv_batch(out); }
  int wait_fd() const noexcept override { return inner_->wait_fd(); }
  size_t max_payload() const noexcept override { return inner_->max_payload(); }
  net::IoStats stats() const noexcept override { return inner_->stats(); }

 private:
  std::unique_ptr<net::PacketIo> inner_;
  std::vector<net::TxPacket> doubled_;
};

inline IoWrap dup_wrap() {
  return [](std::unique_ptr<net::PacketIo> io) -> std::unique_ptr<net::PacketIo> {
    return std::make_unique<DupIo>(std::move(io));
  };
}

}  // namespace uroce::test
