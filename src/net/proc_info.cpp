#include "net/proc_info.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "net/unique_fd.hpp"

namespace uroce::net {

std::optional<ProcStat> proc_stat(pid_t pid) noexcept {
  char path[48];
  if (pid == 0)
    std::snprintf(path, sizeof path, "/proc/self/stat");
  else
    std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[1024];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // The command name (field 2) is in parentheses and may hold anything.
  char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return std::nullopt;
  p += 2;
  ProcStat st{*p, 0};
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (!p) return std::nullopt;
    ++p;
  }
  st.start = std::strtoull(p, nullptr, 10);
  return st;
}

uint64_t ns_inode(const char* kind) noexcept {
  char path[64];
  struct stat st;
  std::snprintf(path, sizeof path, "/proc/thread-self/ns/%s", kind);
  if (::stat(path, &st) == 0) return st.st_ino;
  std::snprintf(path, sizeof path, "/proc/self/ns/%s", kind);
  return ::stat(path, &st) == 0 ? st.st_ino : 0;
}

namespace {

// "0100007F:12B7" (IPv4) or 32 hex digits ":" port (IPv6): each group of 8
// digits is a 32-bit word of the address as it lies in memory, printed as a
// host-order number.
bool parse_proc_endpoint(const std::string& text, IpAddr& addr, uint16_t& port) {
  const size_t colon = text.find(':');
  if (colon != 8 && colon != 32) return false;
  uint8_t raw[16] = {};
  for (size_t w = 0; w < colon / 8; ++w) {
    char* end;
    const std::string word = text.substr(w * 8, 8);
    const uint32_t v = uint32_t(std::strtoul(word.c_str(), &end, 16));
    if (*end) return false;
    std::memcpy(raw + 4 * w, &v, 4);
  }
  char* end;
  const unsigned long p = std::strtoul(text.c_str() + colon + 1, &end, 16);
  if (*end || p > 65535) return false;
  port = uint16_t(p);
  if (colon == 8) {
    in_addr a;
    std::memcpy(&a, raw, 4);
    addr = IpAddr::from_in(a);
  } else {
    addr = IpAddr::from_bytes(raw);
  }
  return true;
}

}  // namespace

std::vector<uid_t> udp_port_holders(const IpAddr& addr, uint16_t port) {
  std::vector<uid_t> out;
  for (const char* name : {"udp", "udp6"}) {
    if (!addr.is_v4() && name[3] == '\0') continue;  // IPv4 sockets never hold an IPv6 address
    std::ifstream in(std::string("/proc/thread-self/net/") + name);
    if (!in) in.open(std::string("/proc/net/") + name);
    std::string line;
    std::getline(in, line);  // the column titles
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr;
      unsigned long uid;
      if (!(f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid)) continue;
      IpAddr a;
      uint16_t p;
      if (!parse_proc_endpoint(local, a, p) || p != port) continue;
      const bool wildcard = a.is_unspecified() || (a.is_v4() && a.v4() == 0);
      if (wildcard || a == addr) out.push_back(uid_t(uid));
    }
  }
  return out;
}

}  // namespace uroce::net
