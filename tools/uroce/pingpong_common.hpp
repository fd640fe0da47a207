// `uroce pingpong`: the experiment of seed 000.  A client plays ping-pong
// with an agent of a listener, four RDMA ways and over TCP, and each side
// reports its round-trip time and CPU.  What the client
// (pingpong_client.cpp), the listener and its agents (pingpong_agent.cpp) and
// the command (pingpong.cpp) share.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "demo_common.hpp"
#include "uroce/uroce.hpp"

namespace uroce::pingpong {

// The ways to play.  The RDMA ones are the seed's four; tcp is the same
// ping-pong over the TCP connection (blocking, as the seed compares), and
// tcp-busy spins on a non-blocking socket (to compare with send-busy).
enum class Mode : uint8_t {
  send_busy,              // SEND/RECV, both sides busy-poll their CQ
  send_notify,            // SEND/RECV, both sides wait for notification
  write_read_signaled,    // client WRITEs then READs back, waiting for each; agent passive
  write_read_unsignaled,  // the WRITE unsignaled: only the READ's completion is waited for
  tcp,                    // send()/recv() on blocking sockets
  tcp_busy,               // send()/recv() on non-blocking sockets, spinning
};
inline constexpr Mode kAllModes[] = {
    Mode::send_busy, Mode::send_notify, Mode::write_read_signaled, Mode::write_read_unsignaled,
    Mode::tcp,       Mode::tcp_busy};

const char* name(Mode m) noexcept;
std::optional<Mode> parse_mode(std::string_view s) noexcept;
inline bool is_tcp(Mode m) noexcept { return m == Mode::tcp || m == Mode::tcp_busy; }
inline bool is_send(Mode m) noexcept { return m == Mode::send_busy || m == Mode::send_notify; }
inline bool is_write_read(Mode m) noexcept {
  return m == Mode::write_read_signaled || m == Mode::write_read_unsignaled;
}
// How the client waits: "busy polling" or "wait-for-notify" (TCP: blocking).
inline bool client_busy(Mode m) noexcept { return m == Mode::send_busy || m == Mode::tcp_busy; }
// One line on what the mode does, for the table's legend.
const char* describe(Mode m) noexcept;

// What one connection plays.
struct Params {
  Mode mode = Mode::send_busy;
  uint32_t size = 8;       // bytes of each ping and pong
  uint64_t iters = 10000;  // round trips measured
  uint64_t warmup = 1000;  // round trips before (not measured)
};

// What one side measured during the use phase (after the warm-up).
struct Figures {
  uint64_t iters = 0;
  double rtt_median = std::nan(""), rtt_p99 = std::nan(""), rtt_mean = std::nan("");  // us
  // A passive side sees no round trips: its mean is elapsed time / round trips.
  bool rtt_from_elapsed = false;
  bench::CpuShare cpu;
  int pid = 0;
  int cpu_pinned = -1;
};
std::map<std::string, std::string> to_kv(const Figures& f);
Figures figures_from(const demo::Msg& m);

// The outcome of one mode: both sides' figures, or what went wrong.
struct Outcome {
  Params params;
  bool ok = false;
  std::string error;
  Figures client, server;
};

// Waiting for the next completion, as the seed does it:
//  - busy: ibv_poll_cq in a tight loop;
//  - notify: poll; arm (req_notify); poll again; sleep in get_event (the
//    waiting thread processes the packets that arrive meanwhile); ack;
//  - sleep: like notify, but sleeping in poll() on the channel's fd, so the
//    NIC's progress thread does the protocol work (a passive agent).
class Waiter {
 public:
  enum class How { busy, notify, sleep };
  Waiter(CompletionQueue& cq, CompletionChannel* channel, How how, int timeout_ms = 10000)
      : cq_(cq), channel_(channel), how_(how), timeout_ms_(timeout_ms) {}
  // The next completion; ETIMEDOUT when none came within the timeout.
  Result<Wc> next();

 private:
  Status refill();
  CompletionQueue& cq_;
  CompletionChannel* channel_;
  How how_;
  int timeout_ms_;
  Wc buf_[16];
  int have_ = 0, at_ = 0;
};

// The client's side of one mode against a listener at `server`; the device
// address is `addr` (unspecified: the local address of the TCP connection).
struct ClientConfig {
  Endpoint server;
  IpAddr addr{};
  uint16_t udp_port = 4791;
  uint32_t mtu = 0;  // path MTU (0: the ports' smaller MTU)
  int cpu = -1;      // the CPU this process is pinned to (reported)
};
Outcome run_client(const ClientConfig& cfg, const Params& p);

// The listener: accepts connections on addr:port and hands each one to an
// agent thread; serves `connections` of them (0: forever).
struct ListenerConfig {
  IpAddr addr;           // TCP address and RDMA device address
  uint16_t port = 7471;  // TCP port (0: ephemeral)
  uint16_t udp_port = 4791;
  uint64_t connections = 0;
  int ready_fd = -1;   // report "ready <port>" here once listening (--local)
  bool quiet = false;  // no line per connection
  int cpu = -1;
};
int run_listener(const ListenerConfig& cfg);

inline constexpr uint16_t kDefaultPort = 7471;

}  // namespace uroce::pingpong
