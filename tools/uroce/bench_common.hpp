// What the measuring subcommands (`uroce pingpong`, `uroce perf`, `uroce
// baseline`) share: clocks and percentiles, CPU accounting split between the
// application's threads and the library's progress thread, pinning, the
// child process that plays the other side with --local, TCP sockets for the
// control connection, and a small JSON writer.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "uroce/uroce.hpp"

namespace uroce::bench {

// ---------------------------------------------------------------- time

// Microseconds on the monotonic clock.
inline double now_us() noexcept {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Order statistics of a set of samples (NaN where there are none).
struct Summary {
  size_t n = 0;
  double min = 0, median = 0, p99 = 0, mean = 0, max = 0;
};
// Sorts `samples` in place.
Summary summarize(std::vector<double>& samples);

// ---------------------------------------------------------------- CPU

// A point in time with the CPU used so far: by the whole process
// (getrusage RUSAGE_SELF) and by the NIC's progress thread
// (Context::progress_cpu, as of its last sleep).
struct CpuSample {
  double wall_us = 0;
  uint64_t proc_user_us = 0, proc_sys_us = 0;
  uint64_t prog_user_us = 0, prog_sys_us = 0;
};
// `ctx` may be null (no NIC: TCP, raw UDP).
CpuSample sample_cpu(const Context* ctx);

// CPU between two samples as percentages of the elapsed time: the
// application's threads (process minus progress thread) and the library's
// progress thread, each user and kernel.
struct CpuShare {
  double elapsed_us = 0;
  double app_user = 0, app_sys = 0;    // % of elapsed
  double prog_user = 0, prog_sys = 0;  // % of elapsed
  double app() const noexcept { return app_user + app_sys; }
  double progress() const noexcept { return prog_user + prog_sys; }
  double total() const noexcept { return app() + progress(); }
};
CpuShare cpu_between(const CpuSample& a, const CpuSample& b);

// ---------------------------------------------------------------- processes

// Pins the calling thread (and the threads it creates later, such as a NIC's
// progress thread) to one CPU; cpu < 0 does nothing.
Status pin_to_cpu(int cpu);
// "0,1" -> {0, 1}; "none" or "-" -> {-1, -1}.  Default when this machine has
// at least two CPUs: the first two it may run on; else no pinning.
Result<std::pair<int, int>> parse_cpu_pair(std::string_view text);
std::string default_cpu_pair();

// A copy of this program (/proc/self/exe) run with `args`, whose fd 3 is the
// write end of a pipe: it reports "ready <value>\n" there once it is
// listening (see report_ready).  Killed (SIGTERM, then SIGKILL) and reaped
// when the Child is destroyed before it exited.
class Child {
 public:
  Child() = default;
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  Status spawn(const std::vector<std::string>& args);
  // The value the child reported with report_ready, within timeout_ms.
  Result<std::string> wait_ready(int timeout_ms = 10000);
  // Waits for the exit (at most timeout_ms, then kills it); the exit status,
  // or 128 + signal.
  int wait(int timeout_ms = 10000);
  pid_t pid() const noexcept { return pid_; }

 private:
  void kill_now() noexcept;
  pid_t pid_ = -1;
  int ready_fd_ = -1;
};
// In the child: writes "ready <value>\n" to fd `fd` and closes it.
void report_ready(int fd, const std::string& value);

// ---------------------------------------------------------------- TCP

// A listening TCP socket on addr:port (port 0: ephemeral); *bound gets the
// port.
Result<int> tcp_listen(const IpAddr& addr, uint16_t port, uint16_t* bound);
// accept() with a timeout (ms, < 0: none); the socket has TCP_NODELAY.
Result<int> tcp_accept(int listen_fd, int timeout_ms);
// A connected socket with TCP_NODELAY, within timeout_ms.
Result<int> tcp_connect(const Endpoint& to, int timeout_ms = 10000);
// "host:port", "host" (default_port), "[v6]:port".
Result<Endpoint> parse_endpoint(std::string_view text, uint16_t default_port);
// The local address of a connected socket.
Result<IpAddr> local_addr_of(int fd);

// Writes or reads exactly n bytes on a blocking (or, busy: non-blocking and
// spinning) stream socket; false on error or EOF.
bool write_all(int fd, const void* p, size_t n);
bool read_all(int fd, void* p, size_t n, bool busy);

// ---------------------------------------------------------------- output

// A JSON document written as it goes: begin_object/end_object,
// begin_array/end_array, key(), value().  Non-finite numbers become null.
class Json {
 public:
  Json& begin_object();
  Json& end_object();
  Json& begin_array();
  Json& end_array();
  Json& key(std::string_view k);
  Json& value(double v);
  Json& value(int64_t v);
  Json& value(uint64_t v);
  Json& value(int v) { return value(int64_t(v)); }
  Json& value(unsigned v) { return value(uint64_t(v)); }
  Json& value(bool v);
  Json& value(std::string_view v);
  Json& value(const char* v) { return value(std::string_view(v)); }
  Json& null();
  template <class T>
  Json& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }
  const std::string& str() const noexcept { return out_; }

 private:
  void comma();
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
};

// "8 B", "4 KiB", "1 MiB" (exact powers of 1024 only; else bytes).
std::string size_name(uint64_t bytes);
// Fixed-point number, or "-" when not finite.
std::string fmt(double v, int decimals = 1);

// The machine's load average "0.12 0.34 0.56".
std::string load_average();

}  // namespace uroce::bench
