#include "common/fast_mutex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uroce {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

uint32_t* word(std::atomic<uint32_t>& a) noexcept { return reinterpret_cast<uint32_t*>(&a); }

}  // namespace

void FastMutex::lock_slow() noexcept {
  // Mark it contended; whoever holds it wakes one sleeper when it lets go.
  // Sleep while it is still held and contended (the kernel checks the word
  // atomically with the sleep: an unlock in between returns at once).
  while (s_.exchange(2, std::memory_order_acquire) != 0)
    (void)::syscall(SYS_futex, word(s_), FUTEX_WAIT_PRIVATE, 2u, nullptr, nullptr, 0);
}

void FastMutex::wake_one() noexcept {
  (void)::syscall(SYS_futex, word(s_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace uroce
