#include "verbs/mr.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <new>

#include "common/own_mappings.hpp"
#include "net/registry.hpp"
#include "transport/nic.hpp"
#include "verbs/context.hpp"
#include "verbs/mw.hpp"
#include "verbs/pd.hpp"
#include "verbs/process_memory.hpp"
#include "verbs/unmap_watch.hpp"

namespace uroce::verbs {
namespace {

uint32_t random_u32() noexcept {
  uint32_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != ssize_t(sizeof r)) r = uint32_t(std::rand());
  return r;
}

// The range must be mapped (verbs pins it; we at least check it exists):
// madvise(MADV_NORMAL) fails with ENOMEM on any unmapped page.
bool range_mapped(uint64_t addr, uint64_t length) noexcept {
  if (length == 0) return true;
  static const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  uint64_t start = addr & ~(page - 1);
  uint64_t end = addr + length;
  if (end < addr) return false;
  return madvise(reinterpret_cast<void*>(start), end - start, MADV_NORMAL) == 0;
}

// MADV_POPULATE_READ/WRITE (Linux 5.14) fault pages in as a read or a
// write would, without accessing them, and fail (ENOMEM unmapped, EINVAL
// PROT_NONE or write to a read-only mapping, EFAULT where the access would
// raise SIGBUS) instead of crashing.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

bool populate_supported() noexcept {
  static const bool ok = [] {
    static uint64_t probe;  // mapped and writable: only an old kernel refuses
    const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
    auto* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(&probe) & ~(page - 1));
    return madvise(start, page, MADV_POPULATE_WRITE) == 0;
  }();
  return ok;
}

MrTable* g_table = nullptr;

}  // namespace

bool Mr::odp_fault_in(const uint8_t* p, uint64_t len, uint32_t need) noexcept {
  if (len == 0) return true;
  static const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t a = reinterpret_cast<uintptr_t>(p);
  const uint64_t start = a & ~(page - 1);
  const uint64_t end = a + len;
  if (end < a) return false;
  if (own_mappings::overlaps(a, len)) return false;        // uroce's own shared memory: never a peer's
  if (!populate_supported()) return range_mapped(a, len);  // no protection check before 5.14
  const bool write = need & (access::kLocalWrite | access::kRemoteWrite | access::kRemoteAtomic);
  return madvise(reinterpret_cast<void*>(start), end - start, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0;
}

Result<std::unique_ptr<Mr>> Mr::reg(Pd& pd, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access) {
  auto mr = MrTable::instance().reg(pd, addr, length, iova, access);
  if (mr.ok()) pd.users()++;
  return mr;
}

Status Mr::rereg(Pd& pd, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access) {
  if (&pd.context() != &pd_->context()) return err::inval("the new PD is of another device");
  // A window's grant is a part of the region as it was bound: the region
  // may not change under it (as it may not be deregistered).
  if (windows() > 0) return err::inval("memory windows are bound to the region: revoke or free them first");
  if (Status s = MrTable::check_region(addr, length, iova, access); !s.ok()) return s;
  // The new pages are watched before the region reaches them.
  const bool watch = !(access & access::kOnDemand) && UnmapWatch::instance().watch(addr, length);
  const uint64_t old_addr = addr_, old_length = length_;
  const bool old_watched = watched_;
  {
    // Under the NIC lock: no packet is using the region while it changes;
    // under the table's: its unmap handler is not reading it.
    std::lock_guard g(pd_->context().nic().mu());
    // Nor a peer's one-copy WRITE or READ (transport/copy_gate.hpp).
    pd_->context().nic().copy_fence();
    std::lock_guard t(MrTable::instance().mu_);
    addr_ = addr;
    length_ = length;
    iova_ = iova;
    access_ = access;
    watched_ = watch;
    seq_ = MrTable::instance().reg_seq_.fetch_add(1, std::memory_order_acq_rel) + 1;
    gone_.store(false, std::memory_order_relaxed);
    if (&pd != pd_) {
      pd_->users()--;
      pd.users()++;
      pd_ = &pd;
    }
  }
  if (old_watched) UnmapWatch::instance().unwatch(old_addr, old_length);
  return {};
}

Mr::~Mr() {
  {
    // Under the NIC lock: no packet is using the region once we return.
    std::lock_guard g(pd_->context().nic().mu());
    if (windows() > 0) MwTable::instance().revoke_region(*this);
    MrTable::instance().dereg(*this);
    // Nor a peer's one-copy WRITE or READ (transport/copy_gate.hpp).
    pd_->context().nic().copy_fence();
  }
  pd_->users()--;
}

MrTable& MrTable::instance() {
  static MrTable* table = [] {
    auto reg = net::HostRegistry::instance();
    if (!reg.ok()) {
      std::fprintf(stderr, "uroce: host registry unavailable (%s); keys are process-local\n",
                   reg.status().to_string().c_str());
      std::array<uint8_t, 16> secret{};
      if (getrandom(secret.data(), secret.size(), 0) != ssize_t(secret.size()))
        for (auto& b : secret) b = uint8_t(std::rand());
      return new MrTable(0, secret);
    }
    return new MrTable((*reg)->slot(), (*reg)->secret());
  }();
  return *table;
}

void MrTable::after_fork_in_child() noexcept {
  new (&mu_) std::mutex;
  // The child's unmap watch starts empty (UnmapWatch::after_fork_in_child):
  // a region it inherited is not watched there, and its deregistration
  // must not take the watch of the child's own region over the same pages.
  for (const auto& c : chunks_)
    if (Entry* chunk = c.load(std::memory_order_relaxed))
      for (uint32_t i = 0; i < kChunk; ++i)
        if (const Mr* mr = chunk[i].mr.load(std::memory_order_relaxed)) const_cast<Mr*>(mr)->watched_ = false;
}

MrTable::MrTable(uint32_t slot, std::span<const uint8_t, 16> secret) : slot_(slot), cipher_(secret) {
  first_index_ = 1 + random_u32() % (kMaxMrs - 1);
  g_table = this;  // for the fork handler, which must not wait on instance()'s initialisation
  ::pthread_atfork(nullptr, nullptr, [] { g_table->after_fork_in_child(); });
  UnmapWatch::instance().set_handler([]() noexcept { return MrTable::instance().reg_count(); },
                                     [](uint64_t lo, uint64_t hi, uint64_t stamp) noexcept {
                                       return MrTable::instance().mark_unmapped(lo, hi, stamp);
                                     });
}

Status MrTable::check_region(uint64_t addr, uint64_t length, uint64_t iova, uint32_t access) {
  if (access & ~access::kKnown) return err::inval("access flags 0x" + std::to_string(access) + " hold unknown bits");
  // IB spec: remote write/atomic access requires local write.
  if ((access & (access::kRemoteWrite | access::kRemoteAtomic)) && !(access & access::kLocalWrite))
    return err::inval("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE as well");
  if (addr + length < addr || iova + length < iova) return err::inval("memory region wraps around the address space");
  // On-demand regions are checked page by page when a packet touches them.
  if (!(access & access::kOnDemand)) {
    const bool writable = access & (access::kLocalWrite | access::kRemoteWrite | access::kRemoteAtomic);
    UROCE_TRY(check_process_memory(addr, length, writable));
  }
  return {};
}

Result<std::unique_ptr<Mr>> MrTable::reg(Pd& pd, uint64_t addr, uint64_t length, uint64_t iova, uint32_t access) {
  if (Status s = check_region(addr, length, iova, access); !s.ok()) return s;
  uint32_t index;
  {
    std::lock_guard g(mu_);
    // Never-used indices first, then the one freed longest ago: a key (index
    // + 4-bit generation) comes back only after the whole table has cycled
    // 16 times, not after 16 reg/dereg pairs of one MR.
    if (fresh_ < kMaxMrs - 1) {
      index = 1 + (first_index_ - 1 + fresh_++) % (kMaxMrs - 1);
    } else if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      return err::nomem("memory region table full (" + std::to_string(kMaxMrs - 1) + " MRs)");
    }
    auto& chunk = chunks_[index / kChunk];
    if (!chunk.load(std::memory_order_relaxed)) {
      Entry* fresh = new Entry[kChunk];
      std::array<uint8_t, kChunk> gens{};
      if (::getrandom(gens.data(), gens.size(), GRND_NONBLOCK) != ssize_t(gens.size()))
        for (auto& g : gens) g = uint8_t(std::rand());
      for (uint32_t i = 0; i < kChunk; ++i) fresh[i].gen = uint8_t(gens[i] & KeyCipher::kGenMask);
      chunk.store(fresh, std::memory_order_release);
    }
    ++live_;
  }
  Entry& e = chunks_[index / kChunk].load(std::memory_order_acquire)[index % kChunk];
  // Made only now: an Mr not in the table must not exist (~Mr deregisters).
  std::unique_ptr<Mr> mr(new Mr());
  mr->pd_ = &pd;
  mr->addr_ = addr;
  mr->length_ = length;
  mr->iova_ = iova;
  mr->access_ = access;
  mr->index_ = index;
  mr->lkey_ = cipher_.encode({slot_, index, e.gen, KeyKind::local});
  mr->rkey_ = cipher_.encode({slot_, index, e.gen, KeyKind::remote});
  // Watched before it is reachable, so that no access can precede it.
  mr->seq_ = reg_seq_.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (!(access & access::kOnDemand)) mr->watched_ = UnmapWatch::instance().watch(addr, length);
  e.mr.store(mr.get(), std::memory_order_release);
  return mr;
}

void MrTable::dereg(Mr& mr) noexcept {
  Entry& e = chunks_[mr.index_ / kChunk].load(std::memory_order_acquire)[mr.index_ % kChunk];
  {
    // Under mu_: mark_unmapped() reads the region only while holding it.
    std::lock_guard g(mu_);
    e.mr.store(nullptr, std::memory_order_release);
    e.gen = uint8_t((e.gen + 1) & KeyCipher::kGenMask);
    free_.insert(free_.begin(), mr.index_);  // back() is the one freed longest ago
    --live_;
  }
  if (mr.watched_) UnmapWatch::instance().unwatch(mr.addr_, mr.length_);
}

bool MrTable::mark_unmapped(uint64_t lo, uint64_t hi, uint64_t stamp) noexcept {
  std::unique_lock g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return false;
  for (const auto& c : chunks_) {
    const Entry* chunk = c.load(std::memory_order_acquire);
    if (!chunk) continue;
    for (uint32_t i = 0; i < kChunk; ++i) {
      const Mr* mr = chunk[i].mr.load(std::memory_order_acquire);
      if (!mr || !mr->watched_ || mr->seq_ > stamp || mr->addr_ >= hi || mr->addr_ + mr->length_ <= lo) continue;
      const_cast<Mr*>(mr)->gone_.store(true, std::memory_order_relaxed);
    }
  }
  return true;
}

const Mr* MrTable::at(uint32_t index, uint32_t key, KeyKind kind) const noexcept {
  if (index == 0 || index >= kMaxMrs) return nullptr;
  Entry* chunk = chunks_[index / kChunk].load(std::memory_order_acquire);
  if (!chunk) return nullptr;
  const Mr* mr = chunk[index % kChunk].mr.load(std::memory_order_acquire);
  if (!mr) return nullptr;
  return (kind == KeyKind::local ? mr->lkey_ : mr->rkey_) == key ? mr : nullptr;
}

const Mr* MrTable::lookup(uint32_t key, KeyKind kind) const noexcept {
  // Keys are distinct host-wide, whatever their kind: the MR found at the
  // hinted index that bears this key of this kind is the one it names.
  std::atomic<uint64_t>& hint = hints_[key % kHints];
  const uint64_t h = hint.load(std::memory_order_relaxed);
  if (uint32_t(h >> 32) == key)
    if (const Mr* mr = at(uint32_t(h), key, kind)) return mr;
  KeyFields f = cipher_.decode(key);
  if (f.slot != slot_ || f.kind != kind) return nullptr;
  const Mr* mr = at(f.index, key, kind);
  if (mr) hint.store(uint64_t(key) << 32 | f.index, std::memory_order_relaxed);
  return mr;
}

size_t MrTable::size() const noexcept {
  std::lock_guard g(const_cast<std::mutex&>(mu_));
  return live_;
}

}  // namespace uroce::verbs
