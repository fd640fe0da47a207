// FastMutex: the NIC's lock.  Exclusion under contention (the futex path
// taken for real on a small host), try_lock, and a sleeper woken by unlock.
#include "common/fast_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace uroce {
namespace {

TEST(FastMutex, ExcludesUnderContention) {
  FastMutex mu;
  uint64_t counter = 0;  // plain: only the lock orders the increments
  constexpr int kThreads = 4, kRounds = 200'000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard g(mu);
        counter = counter + 1;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, uint64_t(kThreads) * kRounds);
}

TEST(FastMutex, TryLockFailsWhileHeldElsewhere) {
  FastMutex mu;
  ASSERT_TRUE(mu.try_lock());
  bool other = true;
  std::thread([&] { other = mu.try_lock(); }).join();
  EXPECT_FALSE(other);
  mu.unlock();
  std::thread([&] {
    other = mu.try_lock();
    if (other) mu.unlock();
  }).join();
  EXPECT_TRUE(other);
}

TEST(FastMutex, SleeperGetsTheLockWhenItIsReleased) {
  FastMutex mu;
  mu.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    mu.lock();
    got.store(true);
    mu.unlock();
  });
  // However long the waiter has been trying, it cannot have the lock yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  mu.unlock();
  waiter.join();  // (unlock woke it: a lost wake-up hangs here, and the test times out)
  EXPECT_TRUE(got.load());
  EXPECT_TRUE(mu.try_lock());  // and it let go
  mu.unlock();
}

}  // namespace
}  // namespace uroce
