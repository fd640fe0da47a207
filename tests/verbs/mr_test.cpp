// Memory regions and their keys: unique, unpredictable, never valid again
// once deregistered; registration checks; the key cipher round-trips.
#include "verbs/mr.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <unordered_set>

#include "common/own_mappings.hpp"
#include "fake_context.hpp"
#include "net/fake_io.hpp"
#include "support/deny_syscall.hpp"
#include "verbs/context.hpp"
#include "verbs/keys.hpp"
#include "verbs/pd.hpp"
#include "verbs/process_memory.hpp"

namespace uroce::verbs {
namespace {

constexpr uint32_t kAll = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;

class MrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = open_fake_context();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(*ctx);
    pd_ = verbs::Pd::create(*ctx_).value();
  }
  void TearDown() override {
    pd_.reset();
    ctx_.reset();
  }
  Result<std::unique_ptr<Mr>> reg(const void* p, size_t len, uint32_t acc = kAll) {
    return Mr::reg(*pd_, uint64_t(uintptr_t(p)), len, uint64_t(uintptr_t(p)), acc);
  }
  const MrTable& table() { return MrTable::instance(); }

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Pd> pd_;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(1 << 16);
};

TEST_F(MrTest, KeysUniqueOverTenThousandLiveRegistrations) {
  std::vector<std::unique_ptr<Mr>> mrs;
  std::unordered_set<uint32_t> keys;
  for (int i = 0; i < 10000; ++i) {
    auto mr = reg(buf_.data() + (i % 4096), 1 + i % 60000);
    ASSERT_TRUE(mr.ok()) << i << ": " << mr.status().to_string();
    EXPECT_NE((*mr)->lkey(), (*mr)->rkey());
    EXPECT_TRUE(keys.insert((*mr)->lkey()).second) << "lkey repeated at " << i;
    EXPECT_TRUE(keys.insert((*mr)->rkey()).second) << "rkey repeated at " << i;
    mrs.push_back(std::move(*mr));
  }
  for (const auto& mr : mrs) {
    ASSERT_EQ(table().lookup(mr->lkey(), KeyKind::local), mr.get());
    ASSERT_EQ(table().lookup(mr->rkey(), KeyKind::remote), mr.get());
    // A key of one kind is useless as the other.
    ASSERT_EQ(table().lookup(mr->lkey(), KeyKind::remote), nullptr);
    ASSERT_EQ(table().lookup(mr->rkey(), KeyKind::local), nullptr);
  }
}

TEST_F(MrTest, KeysAreNotSequential) {
  std::vector<std::unique_ptr<Mr>> mrs;
  std::vector<uint32_t> rkeys, lkeys;
  for (int i = 0; i < 1000; ++i) {
    auto mr = reg(buf_.data(), 4096);
    ASSERT_TRUE(mr.ok());
    rkeys.push_back((*mr)->rkey());
    lkeys.push_back((*mr)->lkey());
    mrs.push_back(std::move(*mr));
  }
  // Successive keys differ by no fixed stride and are not ordered.
  std::set<uint32_t> strides;
  int ascending = 0;
  for (size_t i = 1; i < rkeys.size(); ++i) {
    strides.insert(rkeys[i] - rkeys[i - 1]);
    ascending += rkeys[i] > rkeys[i - 1];
  }
  EXPECT_GT(strides.size(), 990u);
  EXPECT_GT(ascending, 400);
  EXPECT_LT(ascending, 600);
  std::set<uint32_t> lr;
  for (size_t i = 0; i < rkeys.size(); ++i) lr.insert(rkeys[i] - lkeys[i]);
  EXPECT_GT(lr.size(), 990u) << "rkey is a fixed offset from lkey";
}

// One MR at a time, registered and deregistered 10000 times: no key is ever
// handed out twice and no old key resolves again.
TEST_F(MrTest, DeregisteredKeysNeverResolveAgain) {
  std::vector<uint32_t> old;
  std::unordered_set<uint32_t> seen;
  for (int i = 0; i < 10000; ++i) {
    auto mr = reg(buf_.data(), 128);
    ASSERT_TRUE(mr.ok()) << mr.status().to_string() << " at registration " << i;
    const uint32_t l = (*mr)->lkey(), r = (*mr)->rkey();
    ASSERT_TRUE(seen.insert(l).second) << "lkey handed out again after " << i << " registrations";
    ASSERT_TRUE(seen.insert(r).second) << "rkey handed out again after " << i << " registrations";
    // Looked up first, so the table holds hints for these keys when they die.
    ASSERT_EQ(table().lookup(l, KeyKind::local), mr->get());
    ASSERT_EQ(table().lookup(r, KeyKind::remote), mr->get());
    ASSERT_EQ(table().lookup(l, KeyKind::remote), nullptr);
    mr->reset();
    ASSERT_EQ(table().lookup(l, KeyKind::local), nullptr);
    ASSERT_EQ(table().lookup(r, KeyKind::remote), nullptr);
    old.push_back(l);
    old.push_back(r);
  }
  auto live = reg(buf_.data(), 128);
  ASSERT_TRUE(live.ok());
  for (uint32_t k : old) {
    ASSERT_EQ(table().lookup(k, KeyKind::local), nullptr);
    ASSERT_EQ(table().lookup(k, KeyKind::remote), nullptr);
  }
}

// Registration asks the kernel about each mapping (PROCMAP_QUERY, Linux
// 6.11+) and reads /proc/self/maps whole where it cannot: the same answers
// either way (param false: the query refused as by an older kernel).
class MrMapsTest : public MrTest, public ::testing::WithParamInterface<bool> {
 protected:
  void run(const std::function<void()>& checks) {
    const uint64_t before = process_memory_queries();
    if (!GetParam()) {
      refused_before = true;
      ASSERT_TRUE(test::with_syscall_denied(SYS_ioctl, ENOTTY, checks, kProcmapQuery));
      return;
    }
    checks();
    // Where the kernel answers such queries, the checks must have used them
    // (a wrong request number or layout would fall back silently), unless a
    // refusal earlier in this process made it give them up.
    if (kernel_answers_queries() && !refused_before) {
      EXPECT_GT(process_memory_queries(), before) << "registration did not use PROCMAP_QUERY";
    }
  }
  static constexpr uint32_t kProcmapQuery = 0xc0686611u;
  static inline bool refused_before = false;
  // Asks the kernel directly about a mapping of ours (struct procmap_query:
  // 104 bytes, `size` first and the address at byte 16).
  static bool kernel_answers_queries() {
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    uint64_t q[13] = {};
    q[0] = sizeof q;
    q[2] = uint64_t(uintptr_t(&q));
    const bool ok = ::ioctl(fd, kProcmapQuery, q) == 0;
    ::close(fd);
    return ok;
  }
};
// (The refusal is remembered for the process; ctest runs each case in a
// process of its own.)
INSTANTIATE_TEST_SUITE_P(, MrMapsTest, ::testing::Values(true, false),
                         [](const auto& i) { return std::string(i.param ? "MapQueries" : "MapsFileRead"); });

TEST_P(MrMapsTest, UnmappedRangeIsEfault) {
  run([&] {
    const long page = sysconf(_SC_PAGESIZE);
    void* p = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    auto* b = static_cast<uint8_t*>(p);
    ASSERT_EQ(munmap(b + page, page), 0);  // a hole in the middle
    EXPECT_EQ(reg(b + page, page).status().code(), EFAULT);
    EXPECT_EQ(reg(b, 3 * page).status().code(), EFAULT);
    EXPECT_EQ(reg(b + page - 1, 2).status().code(), EFAULT);
    EXPECT_TRUE(reg(b, page).ok());
    EXPECT_TRUE(reg(b + 2 * page, page).ok());
    munmap(b, page);
    munmap(b + 2 * page, page);
    // A wrapping range is refused too.
    EXPECT_EQ(Mr::reg(*pd_, ~0ull - 10, 100, 0, kAll).status().code(), EINVAL);
  });
}

// As rdma-core's pinning does, registration refuses access the pages do not
// grant (issue 11, row 1: a WRITE into a read-only registration crashed the
// progress thread): readable throughout, writable where the flags write.
TEST_P(MrMapsTest, PagesMustGrantWhatTheAccessFlagsAsk) {
  run([&] {
    const long page = sysconf(_SC_PAGESIZE);
    void* p = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    auto* b = static_cast<uint8_t*>(p);
    ASSERT_EQ(mprotect(b + page, page, PROT_READ), 0);
    ASSERT_EQ(mprotect(b + 2 * page, page, PROT_NONE), 0);
    auto ro_all = reg(b + page, 64, kAll);
    EXPECT_EQ(ro_all.status().code(), EFAULT);
    EXPECT_NE(ro_all.status().to_string().find("not writable"), std::string::npos) << ro_all.status().to_string();
    EXPECT_EQ(reg(b + page, 64, access::kLocalWrite).status().code(), EFAULT);
    EXPECT_EQ(reg(b, 2 * page, access::kLocalWrite | access::kRemoteWrite).status().code(), EFAULT) << "spans it";
    EXPECT_TRUE(reg(b + page, 64, access::kRemoteRead).ok()) << "reading a read-only page is granted";
    EXPECT_TRUE(reg(b + page, 64, 0).ok());
    EXPECT_TRUE(reg(b, page, kAll).ok());
    EXPECT_EQ(reg(b + 2 * page, 64, 0).status().code(), EFAULT) << "PROT_NONE is not even readable";
    EXPECT_EQ(reg(b + page, page + 1, access::kRemoteRead).status().code(), EFAULT);
    // On-demand regions are checked when a packet touches them, not here.
    auto odp = reg(b + page, page, kAll | access::kOnDemand);
    ASSERT_TRUE(odp.ok());
    const uint64_t ro = uint64_t(uintptr_t(b + page));
    EXPECT_EQ((*odp)->translate(ro, 8, access::kRemoteWrite), nullptr);
    EXPECT_NE((*odp)->translate(ro, 8, access::kRemoteRead), nullptr);
    odp->reset();
    munmap(b, 3 * page);
  });
}

// uroce's own shared mappings (registry, counters, rings) are never part of
// a memory region, not even of an implicit on-demand one covering the whole
// address space (issue 11, row 4).
TEST_F(MrTest, OwnSharedMappingsAreNeverReachable) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* own = own_mappings::map(page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1);
  ASSERT_NE(own, MAP_FAILED);
  const uint64_t a = uint64_t(uintptr_t(own));
  EXPECT_EQ(reg(own, 64, access::kRemoteRead).status().code(), EFAULT);
  EXPECT_EQ(reg(static_cast<uint8_t*>(own) - 64, 128, 0).status().code(), EFAULT);
  auto implicit = Mr::reg(*pd_, 0, ~0ull, 0, kAll | access::kOnDemand);
  ASSERT_TRUE(implicit.ok()) << implicit.status().to_string();
  EXPECT_EQ((*implicit)->translate(a, 8, access::kRemoteRead), nullptr);
  EXPECT_EQ((*implicit)->translate(a + page - 1, 1, access::kRemoteWrite), nullptr);
  EXPECT_EQ((*implicit)->translate(a - 8, 16, access::kRemoteWrite), nullptr);
  const uint64_t mine = uint64_t(uintptr_t(buf_.data()));
  EXPECT_NE((*implicit)->translate(mine, 64, access::kRemoteWrite), nullptr) << "the application's memory is";
  implicit->reset();
  own_mappings::unmap(own, page);
}

TEST_F(MrTest, AccessFlagChecks) {
  EXPECT_EQ(reg(buf_.data(), 64, access::kRemoteWrite).status().code(), EINVAL);
  EXPECT_EQ(reg(buf_.data(), 64, access::kRemoteAtomic | access::kRemoteRead).status().code(), EINVAL);
  EXPECT_EQ(reg(buf_.data(), 64, 1u << 30).status().code(), EINVAL);
  EXPECT_TRUE(reg(buf_.data(), 64, access::kRemoteRead).ok());
  EXPECT_TRUE(reg(buf_.data(), 64, access::kLocalWrite | access::kRemoteWrite).ok());
  EXPECT_TRUE(reg(buf_.data(), 64, 0).ok());
  auto mr = reg(buf_.data() + 100, 1000, access::kLocalWrite | access::kRemoteRead);
  ASSERT_TRUE(mr.ok());
  const uint64_t base = uint64_t(uintptr_t(buf_.data() + 100));
  EXPECT_NE((*mr)->translate(base, 1000, access::kRemoteRead), nullptr);
  EXPECT_EQ((*mr)->translate(base, 1001, access::kRemoteRead), nullptr);
  EXPECT_EQ((*mr)->translate(base - 1, 1, access::kRemoteRead), nullptr);
  EXPECT_EQ((*mr)->translate(base, 8, access::kRemoteWrite), nullptr);
  EXPECT_EQ((*mr)->translate(base + 999, ~0ull, access::kRemoteRead), nullptr);
}

TEST(KeyCipher, RoundTripsAndPermutes) {
  std::mt19937_64 rng(42);
  std::array<uint8_t, 16> secret;
  for (auto& b : secret) b = uint8_t(rng());
  KeyCipher c(secret);
  std::unordered_set<uint32_t> keys;
  for (int i = 0; i < 200000; ++i) {
    KeyFields f{uint32_t(rng() % KeyCipher::kMaxSlots), uint32_t(rng() % KeyCipher::kMaxIndex),
                uint32_t(rng() & KeyCipher::kGenMask), rng() & 1 ? KeyKind::remote : KeyKind::local};
    const uint32_t k = c.encode(f);
    const KeyFields d = c.decode(k);
    ASSERT_EQ(d.slot, f.slot);
    ASSERT_EQ(d.index, f.index);
    ASSERT_EQ(d.gen, f.gen);
    ASSERT_EQ(d.kind, f.kind);
    keys.insert(k);
  }
  // A permutation: every region key (top bit clear) decodes to fields that
  // encode back to it, and so does every window key (top bit set).
  for (int i = 0; i < 100000; ++i) {
    const uint32_t k = uint32_t(rng());
    if (is_window_key(k)) {
      ASSERT_EQ(c.encode_window(c.decode_window(k)), k);
      ASSERT_EQ(c.decode(k).index, 0u) << "a window key names no region";
    } else {
      ASSERT_FALSE(is_window_key(c.encode(c.decode(k))));
      ASSERT_EQ(c.encode(c.decode(k)), k);
    }
  }
  // Window keys round-trip, keep the consumer's tag, and are distinct.
  std::unordered_set<uint32_t> ids;
  for (uint32_t idx = 0; idx < KeyCipher::kMaxWindowIndex; ++idx) {
    const WindowKeyFields f{7, idx, idx & KeyCipher::kWindowGenMask, uint8_t(idx * 13)};
    const uint32_t k = c.encode_window(f);
    ASSERT_TRUE(is_window_key(k));
    ASSERT_EQ(uint8_t(k), f.tag);
    const WindowKeyFields d = c.decode_window(k);
    ASSERT_EQ(d.slot, 7u);
    ASSERT_EQ(d.index, idx);
    ASSERT_EQ(d.gen, f.gen);
    ids.insert(k >> 8);
  }
  EXPECT_EQ(ids.size(), size_t(KeyCipher::kMaxWindowIndex));
  // Another secret gives other keys for the same fields.
  std::array<uint8_t, 16> other = secret;
  other[0] ^= 1;
  KeyCipher c2(other);
  int same = 0;
  for (uint32_t idx = 1; idx < 1000; ++idx)
    same += c.encode({5, idx, 0, KeyKind::remote}) == c2.encode({5, idx, 0, KeyKind::remote});
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace uroce::verbs
