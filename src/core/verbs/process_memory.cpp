#include "verbs/process_memory.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
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

// Linux 6.11+ answers for one address of /proc/self/maps at a time
// (PROCMAP_QUERY): a registration then costs a query per mapping it spans
// instead of reading and parsing every line of the file (20 us and more per
// registration, growing with the process's mappings).  The layout and
// request number are the kernel's UAPI (linux/fs.h, newer than Debian 12's
// headers).
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
  uint32_t dev_major, dev_minor;
  uint32_t vma_name_size, build_id_size;
  uint64_t vma_name_addr, build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = 0xc0686611;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kVmaReadable = 0x1, kVmaWritable = 0x2;
std::atomic<bool> g_no_query{false};  // the kernel has no PROCMAP_QUERY
std::atomic<uint64_t> g_queries{0};   // checks it answered

// As scan(), by queries; nullopt where the kernel cannot answer so.  The file
// is opened for each check: a descriptor kept open would answer for the
// parent after a fork, and could be closed and its number reused by the
// application.
std::optional<std::string> query(uint64_t addr, uint64_t end, uint64_t page, bool need_write) {
  if (g_no_query.load(std::memory_order_relaxed)) return std::nullopt;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> why = std::string();
  for (uint64_t cur = addr & ~(page - 1); cur < end;) {
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_addr = cur;  // flags 0: the mapping that covers `cur`, if any
    if (::ioctl(fd, kProcmapQuery, &q) != 0) {
      if (errno == ENOENT) {
        why = "not mapped at " + hex(cur);
      } else {
        if (errno == ENOTTY || errno == EINVAL) g_no_query.store(true, std::memory_order_relaxed);
        why = std::nullopt;
      }
      break;
    }
    const bool read = q.vma_flags & kVmaReadable, write = q.vma_flags & kVmaWritable;
    if (!read || (need_write && !write)) {
      why = std::string(read ? "not writable" : "not readable") + " at " + hex(cur) +
            (need_write && !write ? " (the access flags write into it)" : "");
      break;
    }
    if (q.vma_end <= cur) {  // cannot happen; never loop
      why = std::nullopt;
      break;
    }
    cur = q.vma_end;
  }
  ::close(fd);
  if (why) g_queries.fetch_add(1, std::memory_order_relaxed);
  return why;
}

}  // namespace

uint64_t process_memory_queries() noexcept { return g_queries.load(std::memory_order_relaxed); }

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
    why = query(addr, end, page, need_write);
    if (!why) why = scan(addr, end, page, need_write);
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
