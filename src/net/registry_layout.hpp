// The host registry file, as mapped by every uroce process of one user.
// See registry.hpp for what it is for.  Changing anything here means bumping
// kRegistryVersion: processes of two builds must not share a file blindly.
//
// Every field another process may touch concurrently is a lock-free,
// address-free std::atomic, so the layout is plain shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace uroce::net::registry {

inline constexpr uint64_t kMagic = 0x47455245434f5255ULL;  // "UROCEREG" in memory order
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kSlots = 1024;  // slot 0 is never handed out
inline constexpr uint32_t kBindingsPerSlot = 8;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// A slot's owner as one word, so that claiming is a single compare-and-swap:
// pid (24 bits: pid_max is at most 2^22) | process start time in clock ticks
// since boot (40 bits: centuries).  0 = free.
inline constexpr uint64_t owner_word(uint32_t pid, uint64_t start_ticks) noexcept {
  return (start_ticks & ((uint64_t{1} << 40) - 1)) << 24 | (pid & 0xffffff);
}
inline constexpr uint32_t owner_pid(uint64_t word) noexcept { return uint32_t(word & 0xffffff); }
inline constexpr uint64_t owner_start(uint64_t word) noexcept { return word >> 24; }

struct Header {
  std::atomic<uint64_t> magic;  // stored last (release) when the file is initialised
  uint32_t version;
  uint32_t slots;
  uint8_t secret[16];
  uint8_t reserved[256 - 32];
};
static_assert(sizeof(Header) == 256);

// One published (netns, address, port).  Written only by the slot's owner,
// under a seqlock: `seq` is odd while the fields change.  `owner` is the
// owner word it was published under, so bindings left behind by a dead
// process never count for the process that reclaims the slot.
struct Binding {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> port;  // 0 = unused
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> netns;             // inode of /proc/self/ns/net
  std::atomic<uint64_t> addr_hi, addr_lo;  // the 16 address bytes, big-endian halves
  uint64_t reserved;
};
static_assert(sizeof(Binding) == 48);

struct alignas(64) Slot {
  std::atomic<uint64_t> owner;
  // Inode of the owner's pid namespace, set right after the claim: a pid is
  // only checked for liveness by processes of the same pid namespace (others
  // take the owner as alive).  0 while being claimed or released.
  std::atomic<uint64_t> pidns;
  uint8_t reserved[48];
  Binding bindings[kBindingsPerSlot];
};
static_assert(sizeof(Slot) == 64 + 48 * kBindingsPerSlot);

struct File {
  Header header;
  Slot slots[kSlots];
};
inline constexpr size_t kFileSize = sizeof(File);

}  // namespace uroce::net::registry
