// `uroce perf`: latency, bandwidth and message rate of RC SEND, RDMA WRITE,
// RDMA READ and atomics between two processes, over message sizes.  What the
// client (perf_client.cpp), the server (perf_server.cpp) and the command
// (perf.cpp) share.
//
// One RC connection carries a run.  The client drives every measurement
// ("a point": an operation, a test and a size); before each point it tells
// the server over the TCP control connection what comes, and it ends each
// point with a marker (a zero-byte SEND with immediate data) that the server
// waits for, then the server reports its CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "demo_common.hpp"
#include "uroce/uroce.hpp"

namespace uroce::perf {

enum class Op : uint8_t { send, write, read, atomic };
enum class Test : uint8_t { lat, bw };
const char* name(Op o) noexcept;
const char* name(Test t) noexcept;
std::optional<Op> parse_op(std::string_view s) noexcept;
std::optional<Test> parse_test(std::string_view s) noexcept;

// How the server side behaves during one-sided tests: its application
// thread busy-polls its CQ (so the NIC work runs inline there), or it sleeps
// and the NIC's progress thread answers.
enum class Server : uint8_t { poll, sleep };

// One measurement.
struct Point {
  Op op = Op::send;
  Test test = Test::lat;
  uint32_t size = 8;
};

// The knobs of a run.
struct Config {
  double duration_s = 0.3;      // per point (after the warm-up)
  uint64_t max_iters = 100000;  // latency: at most this many round trips per point
  uint32_t window = 64;         // bandwidth: work requests outstanding
  uint32_t post_list = 1;       // bandwidth: work requests per post_send call
  uint32_t signal_every = 16;   // bandwidth: one signaled completion per this many
  bool notify = false;          // the client (and a SEND echo server) waits for notify
  Server server = Server::poll;
  uint32_t mtu = 0;          // path MTU (0: the ports' smaller MTU)
  bool inline_small = true;  // SEND/WRITE of <= 64 bytes inline (no lkey lookup)
  // One-sided bandwidth over this many RC QPs, `window` outstanding on
  // each (the first also carries the markers).
  uint32_t qps = 1;
};

// What one point measured.
struct Outcome {
  Point point;
  bool ok = false;
  std::string error;
  // latency
  bench::Summary rtt;  // us
  // bandwidth
  uint64_t msgs = 0;
  double seconds = 0;
  double msgs_per_s() const { return seconds > 0 ? double(msgs) / seconds : std::nan(""); }
  double bytes_per_s() const { return seconds > 0 ? double(msgs) * point.size / seconds : std::nan(""); }
  // With more than one QP: each QP's payload bytes per second, up to the
  // moment the last work requests were posted, and Jain's fairness index
  // over them ((sum x)^2 / (n sum x^2): 1 when equal, 1/n when one has all).
  std::vector<double> qp_bytes_per_s;
  double jain() const;
  bench::CpuShare client_cpu, server_cpu;
  uint64_t server_received = 0;  // SENDs the server received in the point (warm-up included)
};

struct ClientConfig {
  Endpoint server;
  IpAddr addr{};
  uint16_t udp_port = 4791;
  Config cfg;
};
// Runs the points against a server; an outcome per point (a failed point
// ends the run: the QP is in error by then).
std::vector<Outcome> run_client(const ClientConfig& cc, const std::vector<Point>& points, std::string* error);

struct ServerConfig {
  IpAddr addr;
  uint16_t port = 7472;
  uint16_t udp_port = 4791;
  uint64_t connections = 0;  // 0: forever
  int ready_fd = -1;
  int cpu = -1;
  bool quiet = false;
};
int run_server(const ServerConfig& sc);

inline constexpr uint16_t kDefaultPort = 7472;
// Immediate data of the marker that ends a point.
inline constexpr uint32_t kMarker = 0x5eed0001;
// The most QPs of one run (--qps).
inline constexpr uint32_t kMaxQps = 4096;
// The largest message (the buffers are this large).
inline constexpr uint32_t kMaxSize = 4u << 20;

}  // namespace uroce::perf
