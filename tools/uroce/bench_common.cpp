#include "bench_common.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>

extern char** environ;

namespace uroce::bench {
namespace {

Status sys_error(int e, const std::string& what) { return err::from_errno(e, what + ": " + std::strerror(e)); }

uint64_t tv_us(const timeval& tv) { return uint64_t(tv.tv_sec) * 1'000'000 + uint64_t(tv.tv_usec); }

int set_nodelay(int fd) {
  int one = 1;
  return ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// poll() for one fd, retried on EINTR: > 0 ready, 0 timed out, < 0 error.
int poll_one(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

}  // namespace

// ---------------------------------------------------------------- time

Summary summarize(std::vector<double>& s) {
  Summary r;
  r.n = s.size();
  if (s.empty()) {
    r.min = r.median = r.p99 = r.mean = r.max = std::nan("");
    return r;
  }
  std::sort(s.begin(), s.end());
  auto at = [&](double q) { return s[std::min(s.size() - 1, size_t(q * double(s.size() - 1) + 0.5))]; };
  r.min = s.front();
  r.max = s.back();
  r.median = at(0.5);
  r.p99 = at(0.99);
  r.mean = std::accumulate(s.begin(), s.end(), 0.0) / double(s.size());
  return r;
}

// ---------------------------------------------------------------- CPU

CpuSample sample_cpu(const Context* ctx) {
  CpuSample s;
  s.wall_us = now_us();
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    s.proc_user_us = tv_us(ru.ru_utime);
    s.proc_sys_us = tv_us(ru.ru_stime);
  }
  if (ctx) {
    const CpuTime p = ctx->progress_cpu();
    s.prog_user_us = p.user_us;
    s.prog_sys_us = p.system_us;
  }
  return s;
}

CpuShare cpu_between(const CpuSample& a, const CpuSample& b) {
  CpuShare c;
  c.elapsed_us = b.wall_us - a.wall_us;
  if (c.elapsed_us <= 0) return c;
  auto pct = [&](double us) { return std::max(0.0, 100.0 * us / c.elapsed_us); };
  const double pu = double(b.prog_user_us) - double(a.prog_user_us);
  const double ps = double(b.prog_sys_us) - double(a.prog_sys_us);
  const double u = double(b.proc_user_us) - double(a.proc_user_us);
  const double k = double(b.proc_sys_us) - double(a.proc_sys_us);
  c.prog_user = pct(pu);
  c.prog_sys = pct(ps);
  // The kernel accounts each thread's and the process's total run time
  // exactly, but splits it into user and system time by sampling ticks, so
  // the two splits need not agree: take the application's total exactly
  // (process minus progress thread) and split it as the differences say.
  const double app = std::max(0.0, (u + k) - (pu + ps));
  double au = std::max(0.0, u - pu), as = std::max(0.0, k - ps);
  if (au + as > 0) {
    const double scale = app / (au + as);
    au *= scale;
    as *= scale;
  }
  c.app_user = pct(au);
  c.app_sys = pct(as);
  return c;
}

// ---------------------------------------------------------------- processes

Status pin_to_cpu(int cpu) {
  if (cpu < 0) return {};
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0) return sys_error(errno, "pin to CPU " + std::to_string(cpu));
  return {};
}

Result<std::pair<int, int>> parse_cpu_pair(std::string_view text) {
  if (text == "none" || text == "-") return std::pair<int, int>{-1, -1};
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return err::inval("--cpus wants two CPUs, \"A,B\" (or none)");
  try {
    const int a = std::stoi(std::string(text.substr(0, comma)));
    const int b = std::stoi(std::string(text.substr(comma + 1)));
    if (a < 0 || b < 0) throw std::out_of_range("negative");
    return std::pair<int, int>{a, b};
  } catch (const std::exception&) {
    return err::inval("--cpus " + std::string(text) + ": not two CPU numbers");
  }
}

std::string default_cpu_pair() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) return "none";
  std::vector<int> cpus;
  for (int i = 0; i < CPU_SETSIZE && cpus.size() < 2; ++i)
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  return std::to_string(cpus[0]) + "," + std::to_string(cpus[1]);
}

Child::~Child() {
  if (pid_ > 0) kill_now();
  if (ready_fd_ >= 0) ::close(ready_fd_);
}

void Child::kill_now() noexcept {
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {  // 2 s to go
    int st;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    ::usleep(10'000);
  }
  ::kill(pid_, SIGKILL);
  int st;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
}

Status Child::spawn(const std::vector<std::string>& args) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys_error(errno, "pipe");
  if (p[1] == 3) {  // dup2(3, 3) would leave it close-on-exec
    const int moved = ::fcntl(p[1], F_DUPFD_CLOEXEC, 4);
    ::close(p[1]);
    p[1] = moved;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 3);  // dup2 clears CLOEXEC on fd 3
  std::vector<char*> argv;
  std::string name = "uroce";
  argv.push_back(name.data());
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int e = posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (e != 0) {
    pid_ = -1;
    ::close(p[0]);
    return sys_error(e, "posix_spawn /proc/self/exe");
  }
  ready_fd_ = p[0];
  return {};
}

Result<std::string> Child::wait_ready(int timeout_ms) {
  std::string got;
  const double deadline = now_us() + timeout_ms * 1000.0;
  while (got.find('\n') == std::string::npos) {
    const int left = int((deadline - now_us()) / 1000);
    if (left <= 0 || poll_one(ready_fd_, POLLIN, left) <= 0)
      return err::from_errno(ETIMEDOUT,
                             "the child process did not get ready within " + std::to_string(timeout_ms) + " ms");
    char buf[256];
    const ssize_t n = ::read(ready_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return err::from_errno(EPIPE, "the child process exited before it was ready");
    got.append(buf, size_t(n));
  }
  got.resize(got.find('\n'));
  if (got.rfind("ready ", 0) != 0) return err::from_errno(EPROTO, "the child process said '" + got + "'");
  return got.substr(6);
}

int Child::wait(int timeout_ms) {
  if (pid_ <= 0) return 255;
  const double deadline = now_us() + timeout_ms * 1000.0;
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (r < 0) {
      pid_ = -1;
      return 255;
    }
    if (now_us() > deadline) {
      kill_now();
      return 128 + SIGTERM;
    }
    ::usleep(2'000);
  }
}

void report_ready(int fd, const std::string& value) {
  const std::string line = "ready " + value + "\n";
  ssize_t w;
  do w = ::write(fd, line.data(), line.size());  // a pipe: one small atomic write
  while (w < 0 && errno == EINTR);
  ::close(fd);
}

// ---------------------------------------------------------------- TCP

Result<int> tcp_listen(const IpAddr& addr, uint16_t port, uint16_t* bound) {
  const int fd = ::socket(addr.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error(errno, "socket");
  int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss;
  const socklen_t len = Endpoint{addr, port}.to_sockaddr(ss);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 16) != 0) {
    const int e = errno;
    ::close(fd);
    return sys_error(e, "listen on " + Endpoint{addr, port}.to_string());
  }
  socklen_t l = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l);
  auto ep = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), l);
  if (bound) *bound = ep ? ep->port : port;
  return fd;
}

Result<int> tcp_accept(int listen_fd, int timeout_ms) {
  for (;;) {
    const int r = poll_one(listen_fd, POLLIN, timeout_ms);
    if (r == 0) return err::from_errno(ETIMEDOUT, "no connection within " + std::to_string(timeout_ms) + " ms");
    if (r < 0) return sys_error(errno, "poll");
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)) continue;
    if (fd < 0) return sys_error(errno, "accept");
    set_nodelay(fd);
    return fd;
  }
}

Result<int> tcp_connect(const Endpoint& to, int timeout_ms) {
  const double deadline = now_us() + timeout_ms * 1000.0;
  for (;;) {
    const int fd = ::socket(to.addr.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sys_error(errno, "socket");
    sockaddr_storage ss;
    const socklen_t len = to.to_sockaddr(ss);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      set_nodelay(fd);
      return fd;
    }
    const int e = errno;
    ::close(fd);
    if ((e != ECONNREFUSED && e != EINTR) || now_us() > deadline) return sys_error(e, "connect to " + to.to_string());
    ::usleep(20'000);
  }
}

Result<Endpoint> parse_endpoint(std::string_view text, uint16_t default_port) {
  std::string host(text);
  uint16_t port = default_port;
  std::string port_text;
  if (!host.empty() && host[0] == '[') {
    const auto close = host.find(']');
    if (close == std::string::npos) {
      std::string msg = "'";  // (not "'" + std::string: GCC 12's false -Wrestrict)
      msg += text;
      return err::inval(msg + "': missing ]");
    }
    if (close + 1 < host.size() && host[close + 1] == ':') port_text = host.substr(close + 2);
    host = host.substr(1, close - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    port_text = host.substr(host.find(':') + 1);
    host.resize(host.find(':'));
  }
  if (!port_text.empty()) {
    char* end = nullptr;
    const unsigned long p = std::strtoul(port_text.c_str(), &end, 10);
    if (*end != '\0' || p == 0 || p > 65535) return err::inval("'" + port_text + "' is not a TCP port");
    port = uint16_t(p);
  }
  if (auto a = IpAddr::parse(host)) return Endpoint{*a, port};
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); e != 0 || !res)
    return err::from_errno(EHOSTUNREACH, "cannot resolve '" + host + "': " + ::gai_strerror(e));
  auto ep = Endpoint::from_sockaddr(res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (!ep) return err::inval("'" + host + "': no usable address");
  ep->port = port;
  return *ep;
}

Result<IpAddr> local_addr_of(int fd) {
  sockaddr_storage ss;
  socklen_t l = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l) != 0) return sys_error(errno, "getsockname");
  auto ep = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), l);
  if (!ep) return err::inval("getsockname: unexpected address family");
  return ep->addr;
}

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n, bool busy) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, c, n, busy ? MSG_DONTWAIT : 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// ---------------------------------------------------------------- output

void Json::comma() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

Json& Json::begin_object() {
  comma();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

Json& Json::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}

Json& Json::begin_array() {
  comma();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

Json& Json::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}

Json& Json::key(std::string_view k) {
  value(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

Json& Json::value(double v) {
  if (!std::isfinite(v)) return null();
  comma();
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  out_ += b;
  return *this;
}

Json& Json::value(int64_t v) {
  comma();
  out_ += std::to_string(v);
  return *this;
}

Json& Json::value(uint64_t v) {
  comma();
  out_ += std::to_string(v);
  return *this;
}

Json& Json::value(bool v) {
  comma();
  out_ += v ? "true" : "false";
  return *this;
}

Json& Json::value(std::string_view v) {
  comma();
  out_ += '"';
  for (char c : v) {
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\t': out_ += "\\t"; break;
      default:
        if (uint8_t(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", unsigned(uint8_t(c)));
          out_ += b;
        } else {
          out_ += c;
        }
    }
  }
  out_ += '"';
  return *this;
}

Json& Json::null() {
  comma();
  out_ += "null";
  return *this;
}

std::string size_name(uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string fmt(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "?";
  return a + " " + b + " " + c;
}

}  // namespace uroce::bench
