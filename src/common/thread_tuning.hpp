// How the progress thread asks the kernel to run it promptly, without any
// privilege and without touching the application's threads.
#pragma once

#include <cstdint>

namespace uroce {

// Asks for a scheduler slice of `ns` for the calling thread (Linux 6.12+
// EEVDF: a thread with a shorter slice than the running one preempts it when
// it wakes, instead of waiting up to the running thread's whole slice, about
// 3 ms, for its turn).  The thread's policy and nice value stay as they are.
// Returns false where the kernel has no such slices or refuses (older
// kernels run the thread as before), or clamps `ns` (100 us .. 100 ms).
bool request_short_slice(uint64_t ns) noexcept;

// Sets the calling thread's timer slack: how late the kernel may fire its
// timeouts (the default, 50 us, is as long as the progress thread's ticks).
void set_timer_slack(uint64_t ns) noexcept;

}  // namespace uroce
