// A mutex for the NIC's lock: the same contract as std::mutex (Lockable,
// not recursive, no spinning), taken and released inline.
//
// Every poll of a CQ, post and progress-thread look takes the NIC's lock,
// several times per round trip, almost always uncontended.  std::mutex goes
// through pthread_mutex_lock/unlock: about 55 instructions a pair in
// calls, type checks and owner bookkeeping.  Here an uncontended pair is one
// compare-exchange and one exchange.  Contention parks the thread in the
// kernel (futex) as glibc's normal mutex does; the state word is the usual
// three-state one: 0 free, 1 held, 2 held with (possibly) sleepers.
// ThreadSanitizer sees the acquire/release of the atomic and orders
// accesses made under the lock accordingly.
#pragma once

#include <atomic>
#include <cstdint>

namespace uroce {

class FastMutex {
 public:
  FastMutex() = default;
  FastMutex(const FastMutex&) = delete;
  FastMutex& operator=(const FastMutex&) = delete;

  void lock() noexcept {
    uint32_t free = 0;
    if (!s_.compare_exchange_strong(free, 1, std::memory_order_acquire, std::memory_order_relaxed)) [[unlikely]]
      lock_slow();
  }
  bool try_lock() noexcept {
    uint32_t free = 0;
    return s_.compare_exchange_strong(free, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (s_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
      wake_one();
  }

 private:
  void lock_slow() noexcept;
  void wake_one() noexcept;

  std::atomic<uint32_t> s_{0};
};

}  // namespace uroce
