#include "verbs/process_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "common/own_mappings.hpp"

namespace uroce::verbs {
namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// One line of /proc/self/maps: "start-end perms offset dev inode path".
struct Vma {
  uint64_t start = 0, end = 0;
  bool read = false, write = false;
};

bool parse_line(const char* p, const char* e, Vma& v) {
  auto hexnum = [&](uint64_t& out) {
    out = 0;
    const char* s = p;
    for (; p < e; ++p) {
      const char c = *p;
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) break;
      out = out << 4 | uint64_t(d);
    }
    return p > s;
  };
  if (!hexnum(v.start) || p >= e || *p++ != '-' || !hexnum(v.end) || p + 3 > e || *p++ != ' ') return false;
  v.read = p[0] == 'r';
  v.write = p[1] == 'w';
  return true;
}

// Calls f(vma) for each mapping in address order until it returns false.
// False if the file could not be read.
template <class F>
bool for_each_vma(F&& f) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16384];
  size_t have = 0;
  bool ok = true, more = true;
  while (more) {
    const ssize_t n = ::read(fd, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    have += size_t(n);
    size_t pos = 0;
    for (;;) {
      const char* nl = static_cast<const char*>(std::memchr(buf + pos, '\n', have - pos));
      if (!nl) break;
      Vma v;
      if (parse_line(buf + pos, nl, v) && !f(v)) {
        more = false;
        break;
      }
      pos = size_t(nl - buf) + 1;
    }
    std::memmove(buf, buf + pos, have - pos);
    have -= pos;
    if (have == sizeof buf) have = 0;  // a line longer than the buffer (a long path): skip it
  }
  ::close(fd);
  return ok;
}

// One reading of the maps: empty if every page of [addr, end) is mapped
// with the access asked, else why not; nullopt if /proc cannot be read.
std::optional<std::string> scan(uint64_t addr, uint64_t end, uint64_t page, bool need_write) {
  uint64_t cur = addr & ~(page - 1);
  std::string why;
  const bool read_ok = for_each_vma([&](const Vma& v) {
    if (v.end <= cur) return true;
    if (v.start > cur) {
      why = "not mapped at " + hex(cur);
      return false;
    }
    if (!v.read || (need_write && !v.write)) {
      why = std::string(v.read ? "not writable" : "not readable") + " at " + hex(cur) +
            (need_write && !v.write ? " (the access flags write into it)" : "");
      return false;
    }
    cur = v.end;
    return cur < end;
  });
  if (!read_ok) return std::nullopt;
  if (why.empty() && cur < end) why = "not mapped at " + hex(cur);
  return why;
}

}  // namespace

Status check_process_memory(uint64_t addr, uint64_t len, bool need_write) {
  if (len == 0) return {};
  if (addr + len < addr) return err::from_errno(EFAULT, "memory region wraps around the address space");
  if (own_mappings::overlaps(addr, len))
    return err::from_errno(EFAULT, "memory region covers uroce's own shared memory at " + hex(addr));
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t end = addr + len;
  // /proc/self/maps is read in pieces, and a thread that maps or unmaps
  // memory meanwhile can make one reading skip a mapping: a refusal stands
  // only if a fresh reading sees it again.
  std::optional<std::string> why;
  for (int attempt = 0; attempt < 3; ++attempt) {
    why = scan(addr, end, page, need_write);
    if (!why || why->empty()) break;
  }
  if (!why) {  // no /proc: at least every page must be mapped
    const uint64_t start = addr & ~(page - 1);
    if (::madvise(reinterpret_cast<void*>(start), end - start, MADV_NORMAL) != 0)
      return err::from_errno(EFAULT, "memory region is not mapped in this process");
    return {};
  }
  if (!why->empty()) return err::from_errno(EFAULT, "memory region " + *why);
  return {};
}

}  // namespace uroce::verbs
