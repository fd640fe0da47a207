// Memory regions and the process-wide MR table.
//
// Every incoming RDMA WRITE/READ/atomic names an rkey; every local SGE an
// lkey.  Both resolve through MrTable::lookup() in O(1) without locks (an
// array indexed by the decoded key), then the caller checks PD, access and
// bounds with Mr::check() before a byte moves.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/status.hpp"
#include "verbs/keys.hpp"
#include "verbs/types.hpp"

namespace uroce::verbs {

class Pd;

class Mr {
 public:
  // Registers [addr, addr+length) of this process; peers address it as
  // [iova, iova+length).  The region leaves every lookup when destroyed.
  static Result<std::unique_ptr<Mr>> reg(Pd& pd, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access);
  ~Mr();
  Mr(const Mr&) = delete;
  // ibv_rereg_mr: the region now covers [addr, addr+length) of `pd` with
  // `access`, peers address it as [iova, ...); its lkey and rkey stay (as
  // kernel providers keep them).  `pd` must be of the same context.  On an
  // error the region is unchanged.
  // EINVAL while memory windows are bound to it.
  Status rereg(Pd& pd, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access);
  Mr& operator=(const Mr&) = delete;

  Pd* pd() const noexcept { return pd_; }
  uint64_t addr() const noexcept { return addr_; }  // process virtual address
  uint64_t length() const noexcept { return length_; }
  uint64_t iova() const noexcept { return iova_; }  // address peers use (RETH VA)
  uint32_t access() const noexcept { return access_; }
  uint32_t lkey() const noexcept { return lkey_; }
  uint32_t rkey() const noexcept { return rkey_; }
  // The application unmapped (or mremap'ed away) some of the region's pages
  // while it was registered (see unmap_watch.hpp): every access fails from
  // then on, whatever is mapped there next.
  bool gone() const noexcept { return gone_.load(std::memory_order_relaxed); }
  // Whether unmapping the region's pages is noticed (see unmap_watch.hpp).
  bool watched() const noexcept { return watched_; }
  // Memory windows bound to the region (mw.hpp); it cannot be deregistered
  // while there are any.
  uint32_t windows() const noexcept { return windows_.load(std::memory_order_relaxed); }

  // Host pointer for [iova_addr, iova_addr + len) if it lies inside the
  // region and `need` access bits are granted, else nullptr.  Overflow-safe.
  // An on-demand region (access::kOnDemand) was registered without looking
  // at the memory: its pages are faulted in here, and a range that is not
  // mapped, or not writable when `need` asks for writing, yields nullptr (an
  // access error for the peer) instead of a crash when the bytes are moved.
  uint8_t* translate(uint64_t iova_addr, uint64_t len, uint32_t need) const noexcept {
    if ((access_ & need) != need) return nullptr;
    if (gone()) [[unlikely]]
      return nullptr;
    if (iova_addr < iova_ || len > length_ || iova_addr - iova_ > length_ - len) return nullptr;
    uint8_t* p = reinterpret_cast<uint8_t*>(addr_ + (iova_addr - iova_));
    if (access_ & access::kOnDemand) [[unlikely]]
      return odp_fault_in(p, len, need) ? p : nullptr;
    return p;
  }

 private:
  friend class MrTable;
  friend class Mw;
  Mr() = default;
  // On-demand regions: makes [p, p+len) present (writable if `need` holds a
  // write right) without touching its bytes; false if it is not mapped so.
  static bool odp_fault_in(const uint8_t* p, uint64_t len, uint32_t need) noexcept;
  Pd* pd_ = nullptr;
  uint64_t addr_ = 0, length_ = 0, iova_ = 0;
  uint32_t access_ = 0, lkey_ = 0, rkey_ = 0;
  uint32_t index_ = 0;
  bool watched_ = false;
  uint64_t seq_ = 0;  // MrTable's count of registrations when this one was made
  std::atomic<bool> gone_{false};
  mutable std::atomic<uint32_t> windows_{0};
};

// Process-wide table of MRs; keys are unique on the host (see keys.hpp).
class MrTable {
 public:
  static MrTable& instance();

  // Registers [addr, addr+length) with the given access; iova is the address
  // peers will use.  Fails with EINVAL on bad flags, EFAULT if the range is
  // not mapped (unless on-demand), ENOMEM when the table is full.
  Result<std::unique_ptr<Mr>> reg(Pd& pd, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access);
  // Removes the MR from lookups.  The caller must hold the lock of the NIC
  // the MR's PD belongs to, so no packet is using it.
  void dereg(Mr& mr) noexcept;

  // O(1), lock-free.  Returns nullptr for an unknown/stale key or the wrong kind.
  const Mr* lookup(uint32_t key, KeyKind kind) const noexcept;
  // Marks the watched regions over [lo, hi) gone (UnmapWatch's handler);
  // false, without waiting, if the table is busy.
  // Only regions registered up to `stamp` (reg_count() then) are marked.
  bool mark_unmapped(uint64_t lo, uint64_t hi, uint64_t stamp) noexcept;
  uint64_t reg_count() const noexcept { return reg_seq_.load(std::memory_order_acquire); }

  uint32_t slot() const noexcept { return slot_; }
  const KeyCipher& cipher() const noexcept { return cipher_; }
  size_t size() const noexcept;

  static constexpr uint32_t kChunk = 1024;
  static constexpr uint32_t kMaxMrs = KeyCipher::kMaxIndex;

 private:
  MrTable(uint32_t slot, std::span<const uint8_t, 16> secret);
  // In a forked child mu_ is made anew: the parent's unmap watch may have
  // held it at the fork (marking regions gone, which moves no index).
  void after_fork_in_child() noexcept;
  friend class Mr;
  // The checks of a registration: EINVAL for bad flags or ranges, EFAULT if
  // the range is not mapped (unless on-demand).
  static Status check_region(uint64_t addr, uint64_t length, uint64_t iova, uint32_t access);
  struct Entry {
    std::atomic<const Mr*> mr{nullptr};
    uint8_t gen = 0;
  };
  // The MR at `index` if its key of `kind` is `key`.
  const Mr* at(uint32_t index, uint32_t key, KeyKind kind) const noexcept;
  uint32_t slot_;
  KeyCipher cipher_;
  std::array<std::atomic<Entry*>, kMaxMrs / kChunk> chunks_{};
  // Keys looked up lately, key << 32 | index, by the key's low bits: a hit
  // skips the permutation (six Feistel rounds, walked), about 300
  // instructions per packet.  A hint is only a guess: at() checks it.
  static constexpr size_t kHints = 256;
  mutable std::array<std::atomic<uint64_t>, kHints> hints_{};
  std::mutex mu_;               // allocation of indices
  std::vector<uint32_t> free_;  // freed indices, reused oldest first once no fresh one is left
  // Fresh indices go round the table from a random start, and each entry's
  // generation starts random: the keys of a process differ from those of the
  // last process that held the same registry slot.
  uint32_t first_index_ = 1;  // index 0 is never used
  uint32_t fresh_ = 0;        // how many fresh indices have been handed out
  size_t live_ = 0;
  std::atomic<uint64_t> reg_seq_{0};
};

}  // namespace uroce::verbs
