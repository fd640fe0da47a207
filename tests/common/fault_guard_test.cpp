// fault_guard: copies into and out of memory that is gone or protected end
// in false, never in a crash; a fault outside the guarded range is not
// swallowed.  On x86-64 these go through the assembly copy and its fault
// exit, elsewhere (and under sanitizers) through sigsetjmp.
#include "common/fault_guard.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "support/fault_skip.hpp"

namespace uroce::fault_guard {
namespace {

struct Pages {
  size_t page = size_t(::sysconf(_SC_PAGESIZE));
  size_t count;
  uint8_t* base = nullptr;
  explicit Pages(size_t n) : count(n) {
    void* p = ::mmap(nullptr, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<uint8_t*>(p);
    for (size_t i = 0; i < n * page; ++i) base[i] = uint8_t(i * 7 + 1);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  ~Pages() { ::munmap(base, count * page); }
  uint8_t* at(size_t i) const { return base + i * page; }
  void protect(size_t i, int prot) const { ASSERT_EQ(::mprotect(at(i), page, prot), 0); }
};

TEST(FaultGuard, CopiesExactBytesOfEverySize) {
  Pages m(3);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(63), size_t(4096), size_t(5000)}) {
    std::vector<uint8_t> out(n + 2, 0xee);
    ASSERT_TRUE(copy(out.data() + 1, m.at(0) + 3, n, m.at(0) + 3)) << n;
    EXPECT_EQ(std::memcmp(out.data() + 1, m.at(0) + 3, n), 0) << n;
    EXPECT_EQ(out[0], 0xee);
    EXPECT_EQ(out[n + 1], 0xee);
  }
}

TEST(FaultGuard, ReadFromAnUnreadablePageFails) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  Pages m(2);
  m.protect(1, PROT_NONE);
  uint8_t out[64];
  const uint64_t before = recovered();
  EXPECT_FALSE(copy(out, m.at(1) + 10, 8, m.at(1) + 10));
  // Straddling: the first page's bytes are readable, the rest not.
  EXPECT_FALSE(copy(out, m.at(1) - 16, 32, m.at(1) - 16));
  EXPECT_EQ(recovered(), before + 2);
  EXPECT_FALSE(readable(m.at(1) - 16, 32));
  EXPECT_FALSE(readable(m.at(0), 2 * m.page));
  EXPECT_TRUE(readable(m.at(0), m.page));
  EXPECT_TRUE(readable(m.at(0) + 5, 0));
}

TEST(FaultGuard, WriteToAReadOnlyPageFails) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  Pages m(2);
  m.protect(1, PROT_READ);
  const uint8_t in[16] = {1, 2, 3};
  EXPECT_FALSE(copy(m.at(1) + 100, in, sizeof in, m.at(1) + 100));
  EXPECT_EQ(m.at(1)[100], uint8_t((m.page + 100) * 7 + 1));  // unchanged
  EXPECT_TRUE(copy(m.at(0), in, sizeof in, m.at(0)));
  EXPECT_EQ(std::memcmp(m.at(0), in, sizeof in), 0);
}

// A file mapping past the file's end: SIGBUS, not SIGSEGV (a registered
// file that was truncated).  (An unmapped page is not tested: its address
// may be mapped again by the time of the copy, by another thread.)
TEST(FaultGuard, ReadPastTheEndOfAFileMappingFails) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const int fd = ::memfd_create("fault_guard_test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t(page)), 0);
  void* p = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* b = static_cast<uint8_t*>(p);
  uint8_t out[8];
  const uint64_t before = recovered();
  EXPECT_TRUE(copy(out, b + page - 8, 8, b + page - 8));
  EXPECT_FALSE(copy(out, b + page, 8, b + page));
  EXPECT_FALSE(readable(b + page - 4, 8));
  EXPECT_EQ(recovered(), before + 2);
  ::munmap(p, 2 * page);
}

TEST(FaultGuard, ACopyInsideRunRecoversItselfAndLeavesRunArmed) {
  SKIP_WHERE_FAULTS_ARE_NOT_GUARDED();
  Pages m(2);
  m.protect(1, PROT_NONE);
  uint8_t out[8];
  bool inner = true;
  const bool outer = run(m.at(1), 8, [&] { inner = copy(out, m.at(1), 8, m.at(1)); });
  EXPECT_TRUE(outer);
  EXPECT_FALSE(inner);
  // run()'s own guard still works after the copy's.
  EXPECT_FALSE(run(m.at(1), 8, [&] { std::memcpy(out, m.at(1), 8); }));
}

TEST(FaultGuardDeathTest, AFaultOutsideTheGuardedRangeIsNotSwallowed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Pages m(2);
  m.protect(1, PROT_NONE);
  uint8_t in[8] = {};
  // The application side is `in`; the other side is bad: not ours to hide.
  EXPECT_DEATH((void)copy(m.at(1), in, sizeof in, in), "");
}

}  // namespace
}  // namespace uroce::fault_guard
