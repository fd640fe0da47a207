// What this process's address space grants over a range of memory.
//
// Registering memory with rdma-core pins its pages, writable when the
// access flags let anyone write into it (LOCAL_WRITE, REMOTE_WRITE,
// REMOTE_ATOMIC), and fails with EFAULT where that is not possible.  uroce
// pins nothing, but refuses the same registrations, so that the bytes it
// later moves are ones the process could move itself: the range must be
// mapped throughout (no hole), readable, and writable if need be; and it
// must not cover uroce's own shared mappings (common/own_mappings.hpp).
#pragma once

#include <cstdint>

#include "common/status.hpp"

namespace uroce::verbs {

// OK, or EFAULT naming the first page that fails and why.  Asks the kernel
// about each mapping of the range (PROCMAP_QUERY, Linux 6.11+), else reads
// /proc/self/maps (else, without /proc, checks only that it is mapped).
Status check_process_memory(uint64_t addr, uint64_t len, bool need_write);

// Checks answered by PROCMAP_QUERY so far in this process (tests: which way
// the checks went).
uint64_t process_memory_queries() noexcept;

}  // namespace uroce::verbs
