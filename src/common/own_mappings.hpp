// uroce's own shared mappings (the host registry, the CM listener table,
// the counter files, shared-memory rings) as a process-wide list, so that
// no memory region ever covers one of them: a peer holding the rkey of an
// implicit on-demand region (the whole address space) must not reach the
// registry's secret or another process's ring through it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace uroce::own_mappings {

// mmap(2), remembered when it succeeds (MAP_FAILED otherwise, errno set).
void* map(size_t len, int prot, int flags, int fd, off_t offset = 0) noexcept;
// Forgets, then munmap(2)s, a mapping made by map().
void unmap(void* p, size_t len) noexcept;
// Whether [addr, addr + len) touches any of them.
bool overlaps(uint64_t addr, uint64_t len) noexcept;

// Around fork(), so the child's list is not mid-change: taken last, after
// every NIC's lock (under which the list is also changed), and let go in
// parent and child (transport/nic.cpp).
void lock_for_fork() noexcept;
void unlock_after_fork() noexcept;

}  // namespace uroce::own_mappings
