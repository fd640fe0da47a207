#include "net/listener_table.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/own_mappings.hpp"
#include "net/addr_words.hpp"
#include "net/proc_info.hpp"
#include "net/registry.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace listeners {

inline constexpr uint64_t kMagic = 0x4c4d4345434f5255ULL;  // "UROCECML" in memory order
inline constexpr uint32_t kVersion = 1;

struct Header {
  std::atomic<uint64_t> magic;  // stored last (release) when the file is initialised
  uint32_t version;
  uint32_t entries;
  uint8_t reserved[48];
};
static_assert(sizeof(Header) == 64);

// One listener.  `owner` is claimed by compare-and-swap; the other fields
// are written by the owner under `seq` (odd while they change).
struct Entry {
  std::atomic<uint64_t> owner;  // registry owner word; 0 = free
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> slot;
  std::atomic<uint64_t> netns;
  std::atomic<uint64_t> addr_hi, addr_lo;
  std::atomic<uint64_t> service_id;  // 0 = being written or withdrawn
  uint64_t reserved[2];
};
static_assert(sizeof(Entry) == 64);

struct File {
  Header header;
  Entry entries[ListenerTable::kEntries];
};

}  // namespace listeners

namespace {

using listeners::Entry;

struct View {
  uint64_t owner;
  uint32_t slot;
  uint64_t netns;
  IpAddr addr;
  uint64_t service_id;
};

bool read_entry(const Entry& e, View& v) {
  constexpr auto acq = std::memory_order_acquire;
  for (int tries = 0; tries < 100; ++tries) {
    v.owner = e.owner.load(acq);
    if (v.owner == 0) return false;
    const uint32_t s = e.seq.load(acq);
    if (s & 1) continue;
    v.slot = e.slot.load(acq);
    v.netns = e.netns.load(acq);
    const uint64_t hi = e.addr_hi.load(acq), lo = e.addr_lo.load(acq);
    v.service_id = e.service_id.load(acq);
    if (e.seq.load(std::memory_order_relaxed) != s || e.owner.load(acq) != v.owner) continue;
    v.addr = addr_from_halves(hi, lo);
    return v.service_id != 0;
  }
  return false;
}

void write_entry(Entry& e, uint32_t slot, uint64_t netns, const IpAddr& a, uint64_t sid) {
  constexpr auto rel = std::memory_order_release;
  const uint32_t s = e.seq.load(std::memory_order_relaxed);
  const uint32_t w = s + 1 + (s & 1);
  e.seq.store(w, std::memory_order_relaxed);
  e.service_id.store(0, rel);
  e.slot.store(slot, rel);
  e.netns.store(netns, rel);
  e.addr_hi.store(addr_half(a, 0), rel);
  e.addr_lo.store(addr_half(a, 1), rel);
  e.service_id.store(sid, rel);
  e.seq.store(w + 1, rel);
}

bool is_any(const IpAddr& a) { return a.is_unspecified() || a == IpAddr::from_v4(0); }

// Does a listener on `l` take packets to `d`?
bool covers(const IpAddr& l, const IpAddr& d) {
  if (l == d) return true;
  if (l == IpAddr::from_v4(0)) return d.is_v4();
  return l.is_unspecified();
}

Status sys_error(const std::string& path, const char* what, int e = errno) {
  return err::from_errno(e, "listener table " + path + ": " + what + ": " + std::strerror(e));
}

}  // namespace

Result<std::unique_ptr<ListenerTable>> ListenerTable::open(std::shared_ptr<HostRegistry> reg) {
  std::unique_ptr<ListenerTable> t(new ListenerTable());
  t->path_ = reg->path() + ".cm";
  t->reg_ = std::move(reg);
  t->netns_ = ns_inode("net");
  const std::string& path = t->path_;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return sys_error(path, "open");
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR) return sys_error(path, "flock");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error(path, "fstat");
  if (!S_ISREG(st.st_mode)) return err::inval("listener table " + path + ": not a regular file");
  if (st.st_uid != ::geteuid()) return err::access("listener table " + path + ": not owned by us");
  if (st.st_mode & 077) return err::access("listener table " + path + ": gives others access");
  if (st.st_size == 0) {
    (void)::fchmod(fd.get(), 0600);
    if (int e = ::posix_fallocate(fd.get(), 0, sizeof(listeners::File)); e != 0)
      return sys_error(path, "posix_fallocate", e);
  } else if (size_t(st.st_size) != sizeof(listeners::File)) {
    return err::from_errno(
        EPROTO, "listener table " + path + ": size " + std::to_string(st.st_size) + " (another uroce version?)");
  }
  void* p = own_mappings::map(sizeof(listeners::File), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return sys_error(path, "mmap");
  t->file_ = static_cast<listeners::File*>(p);
  listeners::Header& h = t->file_->header;
  if (h.magic.load(std::memory_order_acquire) == 0) {
    h.version = listeners::kVersion;
    h.entries = kEntries;
    h.magic.store(listeners::kMagic, std::memory_order_release);
  } else if (h.magic.load() != listeners::kMagic || h.version != listeners::kVersion) {
    return err::from_errno(EPROTO, "listener table " + path + ": not a uroce listener table of version " +
                                       std::to_string(listeners::kVersion));
  }
  ::flock(fd.get(), LOCK_UN);
  return t;
}

ListenerTable::~ListenerTable() {
  if (!file_) return;
  // Withdraw what we still have (the entries would not count anyway once
  // the slot is released, but may be reused sooner this way).
  const uint64_t me = reg_->owner_word();
  for (Entry& e : file_->entries) {
    uint64_t cur = me;
    if (e.owner.load(std::memory_order_relaxed) == me) {
      e.service_id.store(0, std::memory_order_release);
      e.owner.compare_exchange_strong(cur, 0, std::memory_order_acq_rel);
    }
  }
  own_mappings::unmap(file_, sizeof(listeners::File));
}

Status ListenerTable::add(const IpAddr& addr, uint64_t sid) {
  if (sid == 0) return err::inval("listener table: service ID 0");
  std::lock_guard g(mu_);
  const uint64_t me = reg_->owner_word();
  Entry* free = nullptr;
  for (Entry& e : file_->entries) {
    View v;
    if (!read_entry(e, v)) {
      if (!free && e.owner.load(std::memory_order_acquire) == 0) free = &e;
      continue;
    }
    const bool live = v.owner == me || reg_->holds(v.slot, v.owner);
    if (!live) {
      if (!free) free = &e;
      continue;
    }
    if (v.owner != me && v.netns == netns_ && v.service_id == sid && (covers(v.addr, addr) || covers(addr, v.addr)))
      return err::from_errno(EADDRINUSE, "rdma_cm port " + std::to_string(sid & 0xffff) + " on " + addr.to_string() +
                                             " is taken by another process (slot " + std::to_string(v.slot) + ")");
  }
  // Claim an entry: a free one, or a complete one whose owner is gone (one
  // being written, service ID still 0, is left alone).
  for (Entry* e = free ? free : file_->entries; e < file_->entries + kEntries; ++e) {
    uint64_t cur = e->owner.load(std::memory_order_acquire);
    if (cur == me) continue;
    if (cur != 0) {
      View v;
      if (!read_entry(*e, v) || reg_->holds(v.slot, v.owner)) continue;
      cur = v.owner;
    }
    if (!e->owner.compare_exchange_strong(cur, me, std::memory_order_acq_rel)) continue;
    write_entry(*e, reg_->slot(), netns_, addr, sid);
    return {};
  }
  return err::from_errno(ENOSPC,
                         "listener table " + path_ + ": all " + std::to_string(kEntries) + " entries are in use");
}

void ListenerTable::remove(const IpAddr& addr, uint64_t sid) noexcept {
  std::lock_guard g(mu_);
  const uint64_t me = reg_->owner_word();
  for (Entry& e : file_->entries) {
    if (e.owner.load(std::memory_order_acquire) != me) continue;
    View v;
    if (!read_entry(e, v) || v.service_id != sid || v.addr != addr || v.netns != netns_) continue;
    write_entry(e, 0, 0, IpAddr{}, 0);
    uint64_t cur = me;
    e.owner.compare_exchange_strong(cur, 0, std::memory_order_acq_rel);
    return;
  }
}

std::optional<uint32_t> ListenerTable::find(const IpAddr& addr, uint64_t sid) const {
  std::optional<uint32_t> wildcard;
  for (const Entry& e : file_->entries) {
    if (e.owner.load(std::memory_order_relaxed) == 0) continue;
    View v;
    if (!read_entry(e, v) || v.service_id != sid || v.netns != netns_) continue;
    const bool exact = v.addr == addr;
    if (!exact && (wildcard || !is_any(v.addr) || !covers(v.addr, addr))) continue;
    if (v.owner != reg_->owner_word() && !reg_->holds(v.slot, v.owner)) continue;
    if (exact) return v.slot;
    wildcard = v.slot;
  }
  return wildcard;
}

std::vector<std::pair<uint64_t, uint32_t>> ListenerTable::on(const IpAddr& addr) const {
  std::vector<std::pair<uint64_t, uint32_t>> out;
  for (const Entry& e : file_->entries) {
    if (e.owner.load(std::memory_order_relaxed) == 0) continue;
    View v;
    if (!read_entry(e, v) || v.service_id == 0 || v.netns != netns_) continue;
    if (v.addr != addr && !(is_any(v.addr) && covers(v.addr, addr))) continue;
    if (v.owner != reg_->owner_word() && !reg_->holds(v.slot, v.owner)) continue;
    out.emplace_back(v.service_id, v.slot);
  }
  return out;
}

}  // namespace uroce::net
