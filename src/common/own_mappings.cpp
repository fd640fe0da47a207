#include "common/own_mappings.hpp"

#include <sys/mman.h>

#include <mutex>
#include <vector>

namespace uroce::own_mappings {
namespace {

struct Range {
  uint64_t start, end;  // [start, end)
};

struct Table {
  std::mutex mu;
  std::vector<Range> ranges;
};

Table& table() {
  static Table* t = new Table();  // never destroyed: used until the very end
  return *t;
}

}  // namespace

void* map(size_t len, int prot, int flags, int fd, off_t offset) noexcept {
  void* p = ::mmap(nullptr, len, prot, flags, fd, offset);
  if (p == MAP_FAILED) return p;
  Table& t = table();
  std::lock_guard g(t.mu);
  const uint64_t a = uint64_t(reinterpret_cast<uintptr_t>(p));
  try {
    t.ranges.push_back({a, a + len});
  } catch (...) {
    ::munmap(p, len);  // unremembered, it must not exist
    return MAP_FAILED;
  }
  return p;
}

void unmap(void* p, size_t len) noexcept {
  {
    Table& t = table();
    std::lock_guard g(t.mu);
    const uint64_t a = uint64_t(reinterpret_cast<uintptr_t>(p));
    std::erase_if(t.ranges, [a](const Range& r) { return r.start == a; });
  }
  ::munmap(p, len);
}

bool overlaps(uint64_t addr, uint64_t len) noexcept {
  const uint64_t end = addr + len < addr ? ~0ull : addr + len;
  Table& t = table();
  std::lock_guard g(t.mu);
  for (const Range& r : t.ranges)
    if (r.start < end && addr < r.end) return true;
  return false;
}

void lock_for_fork() noexcept { table().mu.lock(); }
void unlock_after_fork() noexcept { table().mu.unlock(); }

}  // namespace uroce::own_mappings
