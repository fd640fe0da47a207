#include "demo_common.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace uroce::demo {

Buffer::Buffer(size_t n) : size(n) {
  const size_t rounded = (n + 4095) / 4096 * 4096;
  data = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (data) std::memset(data, 0, rounded);
}

Buffer::~Buffer() { std::free(data); }

void fill_text(std::span<std::byte> out, std::string_view text) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte(text[i % text.size()]);
}

uint64_t fnv1a(std::span<const std::byte> b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte c : b) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string preview(std::span<const std::byte> b, size_t max) {
  std::string out = "\"";
  for (size_t i = 0; i < b.size() && i < max; ++i) {
    const auto c = char(b[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", unsigned(uint8_t(c)));
      out += esc;
    }
  }
  out += b.size() > max ? "\"..." : "\"";
  return out;
}

std::string Msg::str(const std::string& key) const {
  auto it = kv.find(key);
  return it == kv.end() ? std::string() : it->second;
}

uint64_t Msg::num(const std::string& key) const {
  const std::string v = str(key);
  if (v.empty()) return 0;
  return std::strtoull(v.c_str(), nullptr, 0);
}

Status Link::send(const std::string& verb, const std::map<std::string, std::string>& kv) {
  std::string line = verb;
  for (const auto& [k, v] : kv) line += " " + k + "=" + v;
  line += "\n";
  std::fflush(stdout);  // our lines first: the other side may print next
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return err::from_errno(errno, std::string("sending '") + verb + "' to the other side: " + std::strerror(errno));
    off += size_t(n);
  }
  return {};
}

Result<Msg> Link::recv(int timeout_ms) {
  for (;;) {
    if (auto nl = in_.find('\n'); nl != std::string::npos) {
      std::istringstream ss(in_.substr(0, nl));
      in_.erase(0, nl + 1);
      Msg m;
      ss >> m.verb;
      if (m.verb == "error") {  // "error <free text>"
        std::string rest;
        std::getline(ss, rest);
        m.kv["what"] = rest.empty() ? rest : rest.substr(1);
        return m;
      }
      std::string item;
      while (ss >> item) {
        const auto eq = item.find('=');
        if (eq != std::string::npos) m.kv[item.substr(0, eq)] = item.substr(eq + 1);
      }
      return m;
    }
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0)
      return err::from_errno(ETIMEDOUT, "the other side did not answer within " + std::to_string(timeout_ms) + " ms");
    char buf[4096];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return err::from_errno(errno, std::string("reading from the other side: ") + std::strerror(errno));
    if (n == 0) return err::from_errno(EPIPE, "the other side closed the connection");
    in_.append(buf, size_t(n));
  }
}

Result<Msg> Link::expect(const std::string& verb, int timeout_ms) {
  auto m = recv(timeout_ms);
  if (!m.ok()) return m;
  if (m->verb == "error") return err::from_errno(EPROTO, "the other side failed: " + m->str("what"));
  if (m->verb != verb)
    return err::from_errno(EPROTO, "expected '" + verb + "' from the other side, got '" + m->verb + "'");
  return m;
}

std::string hex(uint64_t v, int digits) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return b;
}

void say(const char* who, const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::printf("   %-7s | %s\n", who, line);
  std::fflush(stdout);
}

void blank() {
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void note(const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::printf("%s\n", line);
  std::fflush(stdout);
}

std::string describe(const Wc& wc) {
  return std::string("status ") + to_string(wc.status) + ", opcode " + to_string(wc.opcode) + ", byte_len " +
         std::to_string(wc.byte_len);
}

PeerInfo peer_from(const Msg& m) {
  PeerInfo p;
  if (auto a = IpAddr::parse(m.str("gid"))) p.gid = *a;
  p.qpn = uint32_t(m.num("qpn"));
  p.psn = uint32_t(m.num("psn"));
  p.mtu = uint32_t(m.num("mtu"));
  return p;
}

std::map<std::string, std::string> to_kv(const PeerInfo& p) {
  return {{"gid", p.gid.to_string()}, {"qpn", hex(p.qpn)}, {"psn", hex(p.psn)}, {"mtu", std::to_string(p.mtu)}};
}

}  // namespace uroce::demo
