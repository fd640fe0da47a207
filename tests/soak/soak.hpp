// The soak: RC WRITE, READ, SEND and atomics on several QPs, every byte
// checked, every FETCH_AND_ADD applied exactly once, under injected (or
// real) packet loss, duplication and reordering, in bounded time.
//
// Two roles, usable in one process or in two:
//  - the server (B) exposes, per QP, a source region (a pattern both sides
//    can compute), a destination region, two atomic words, and receive
//    buffers; it checks every SEND it receives against the pattern;
//  - the client (A) runs, per QP, the cycle
//      WRITE A.src[x] -> B.dst[w]          (a random offset and length)
//      READ  B.dst[w] -> A.rdst[r]         must equal A.src[x]: the WRITE arrived whole
//      READ  B.src[y] -> A.rdst[r']        must equal the pattern
//      SEND  A.src[z] (imm = z / 64)       the server checks it
//      FETCH_AND_ADD B.word0 += 1          the returned values are 0, 1, 2, ... once each
//      COMPARE_SWAP B.word1: k -> k+1      must return k
//    with up to `depth` work requests in flight, until bytes_per_qp bytes
//    (WRITE + READ + SEND payloads) have moved; then it reads both words:
//    word0 must be the number of FETCH_AND_ADDs, word1 that of the CAS.
//
// The engine talks to devices through `Side`, so the same soak runs over
// the core verbs on a FakeNetwork (open_fake_side), over the public C++ API
// on UDP (open_api_side), and -- once src/compat lands -- over libibverbs
// (a Side over ibv_post_send/ibv_poll_cq: the work request and completion
// structures already have the verbs layout).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "uroce/device.hpp"
#include "uroce/faults.hpp"
#include "uroce/ip_addr.hpp"
#include "uroce/status.hpp"
#include "uroce/types.hpp"

namespace uroce::net {
class FakeNetwork;
}

namespace uroce::soak {

using CounterList = std::vector<std::pair<std::string, uint64_t>>;

struct QpParams {
  Mtu mtu = Mtu::m4096;
  uint8_t timeout = 12;  // 4.096 us * 2^12 = 16.8 ms: 8 tries survive a 134 ms stall
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;      // forever
  uint8_t min_rnr_timer = 1;  // 10 us
  uint8_t max_rd_atomic = 16;
};

struct Region {
  uint8_t* p = nullptr;
  size_t len = 0;
  uint32_t lkey = 0, rkey = 0;
  uint64_t addr() const { return uint64_t(uintptr_t(p)); }
  Sge sge(size_t off, uint32_t n) const { return Sge{addr() + off, n, lkey}; }
};

struct QpInfo {
  IpAddr gid;
  uint32_t qpn = 0;
  uint32_t psn = 0;
};

// One device with n RC QPs, each with its own CQ for sends and receives.
class Side {
 public:
  virtual ~Side() = default;
  virtual std::string name() const = 0;
  // Registered memory (all access rights), zeroed, page-aligned; it lives as
  // long as the Side.
  virtual Result<Region> reg(size_t len) = 0;
  virtual Status create_qps(int n, uint32_t depth) = 0;
  virtual QpInfo info(int i) const = 0;
  virtual Status connect(int i, const QpInfo& peer, const QpParams& p) = 0;
  virtual Status post_send(int i, const SendWr& wr) = 0;
  virtual Status post_recv(int i, const RecvWr& wr) = 0;
  virtual Result<size_t> poll(int i, std::span<Wc> out) = 0;
  // Takes and releases the NIC lock: what the NIC wrote before is visible to
  // this thread after, and what this thread did before is ordered before the
  // NIC's next work (for the sanitizers: they cannot see through sockets).
  virtual void sync() = 0;
  virtual CounterList counters() = 0;
};

// A device of the core verbs on `net` (a FakeNetwork), with faults if given.
Result<std::unique_ptr<Side>> open_fake_side(std::shared_ptr<net::FakeNetwork> net, const char* addr,
                                             const std::optional<FaultConfig>& faults);
// A device of the public C++ API (UDP).
Result<std::unique_ptr<Side>> open_api_side(const DeviceInfo& dev);

struct Options {
  int qps = 4;
  uint64_t bytes_per_qp = 16ull << 20;
  uint32_t chunk = 64 << 10;  // WRITE/READ/SEND sizes are chunk/2 .. chunk
  uint32_t depth = 16;        // work requests in flight per QP
  uint64_t seed = 1;
  QpParams qp;
  std::chrono::milliseconds time_limit{60000};
};

// What the server exposes of one QP.
struct ServerQp {
  QpInfo qp;
  uint64_t src_addr = 0, dst_addr = 0, atom_addr = 0;
  uint32_t src_rkey = 0, dst_rkey = 0, atom_rkey = 0;
};

inline constexpr size_t kSrcBytes = 4 << 20;  // pattern regions

// Fills p with the pattern of (seed, key) (a multiple of 8 bytes).
void fill_pattern(uint8_t* p, size_t len, uint64_t seed, uint64_t key);

class Server {
 public:
  Server(Side& side, const Options& o) : side_(side), o_(o) {}
  Status setup();
  ServerQp exposed(int i) const;
  Status connect(int i, const QpInfo& client);
  // Checks and reposts the receives that completed.
  Status step();
  uint64_t sends_checked() const;
  uint64_t sends_checked(int i) const { return qps_[size_t(i)].sends; }

 private:
  struct Q {
    Region src, dst, atom, recv;
    std::vector<uint8_t> client_src;  // the client's pattern, to check SENDs
    uint64_t sends = 0;
  };
  Status post_recv(int i, uint32_t slot);
  Side& side_;
  Options o_;
  std::vector<Q> qps_;
};

struct Totals {
  uint64_t bytes = 0, writes = 0, reads = 0, sends = 0, faas = 0, cas = 0;
};

class Client {
 public:
  Client(Side& side, const Options& o) : side_(side), o_(o) {}
  Status setup();
  QpInfo info(int i) const { return side_.info(i); }
  Status connect(int i, const ServerQp& s);
  // Posts what may be posted and checks what completed.  True once every
  // QP has finished (its final atomic words read and checked).
  Result<bool> step();
  Totals totals() const;
  uint64_t sends(int i) const { return qps_[size_t(i)].sends; }
  // Where each QP is (for a report on a timeout).
  std::string progress() const;

 private:
  enum class Kind : uint8_t { write, readback, read, send, faa, cas, final_read };
  struct Pending {
    uint64_t n;
    Kind kind;
    uint32_t slot;
    uint32_t len;
    const uint8_t* expect;
  };
  struct Q {
    Region src, rdst, ares;
    ServerQp peer;
    std::vector<uint8_t> server_src;  // the server's pattern, to check READs
    std::deque<Pending> pending;
    uint64_t next_n = 0;
    uint64_t rslot = 0, wslot = 0, aslot = 0;
    uint64_t last_write_off = 0;
    uint32_t last_write_len = 0, last_write_slot = 0;
    uint64_t bytes = 0, writes = 0, reads = 0, sends = 0, faas = 0, cas = 0;
    uint64_t cas_next = 0;
    std::vector<uint64_t> faa_seen;
    bool final_posted = false, done = false;
  };
  Status post_next(int i, Q& q);
  Status complete(int i, Q& q, const Wc& wc);
  Side& side_;
  Options o_;
  std::vector<Q> qps_;
};

struct Report {
  bool ok = false;
  std::string error;
  double seconds = 0;
  Totals totals;
  uint64_t sends_checked = 0;
  double max_step_gap_ms = 0;  // the longest the driving thread went without a round
  CounterList client_counters, server_counters;
  std::string summary() const;  // one paragraph: sizes, time, rate, main counters
};

// Both roles in this thread.
Report run_in_process(Side& client, Side& server, const Options& o);

// A counter's value from a list (0 if absent).
uint64_t counter(const CounterList& c, std::string_view name);

}  // namespace uroce::soak
