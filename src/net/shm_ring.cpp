#include "net/shm_ring.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "common/fault_guard.hpp"
#include "common/log.hpp"
#include "common/own_mappings.hpp"
#include "net/proc_info.hpp"
#include "net/runtime_dir.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace {

using namespace shm;

constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
constexpr auto kRlx = std::memory_order_relaxed;
constexpr auto kSc = std::memory_order_seq_cst;
constexpr auto kAcqRel = std::memory_order_acq_rel;

Status sys_error(const std::string& path, const char* what, int e) {
  return err::from_errno(e, "shm ring " + path + ": " + what + ": " + std::strerror(e));
}

std::string prefix() { return "uroce-" + std::to_string(::geteuid()) + "-"; }

// Whether (pid, start) is a live process (not a zombie, pid not reused).
bool process_alive(pid_t pid, uint64_t start) {
  if (pid <= 0) return false;
  const auto st = proc_stat(pid);
  if (!st) return ::kill(pid, 0) == 0 || errno == EPERM;  // no /proc: trust kill
  return st->state != 'Z' && st->state != 'X' && (start == 0 || st->start == start);
}

// A producer pid from a slot word (22 bits: Linux pids are below 2^22).
bool pid_dead(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

// Reads and checks the header of an open ring file; false if it is not one.
bool read_header(int fd, const struct stat& st, Header& h) {
  if (size_t(st.st_size) < kHeaderSize) return false;
  uint8_t raw[sizeof(Header)];
  if (::pread(fd, raw, sizeof raw, 0) != ssize_t(sizeof raw)) return false;
  std::memcpy(static_cast<void*>(&h), raw, sizeof raw);
  if (h.magic.load(kRlx) != kMagic || h.version != kVersion) return false;
  if (h.slots < 2 || !std::has_single_bit(h.slots) || h.slots > 65536) return false;
  if (h.slot_size != kSlotHeader + h.payload_max || h.slot_size % 64 != 0 || h.payload_max > 65536) return false;
  return size_t(st.st_size) == kHeaderSize + size_t(h.slots) * h.slot_size;
}

}  // namespace

Result<std::string> shm_dir() {
  const char* d = std::getenv("UROCE_SHM_DIR");
  if (d && *d) return std::string(d);
  return runtime_dir();
}

std::string shm_ring_path(const std::string& dir, const Endpoint& ep, int slot) {
  static const uint64_t netns = ns_inode("net");
  return dir + "/" + prefix() + std::to_string(netns) + "-" + ep.addr.to_string() + "-" + std::to_string(ep.port) +
         (slot >= 0 ? "-s" + std::to_string(slot) : std::string()) + ".ring";
}

Result<std::unique_ptr<ShmRing>> ShmRing::create(const std::string& path, const CreateOptions& opt) {
  const uint32_t slots = std::bit_ceil(std::clamp<uint32_t>(opt.slots, 2, 65536));
  const size_t payload = (std::clamp<size_t>(opt.payload_max, 64, 65536) + 63) / 64 * 64;
  const size_t slot_size = kSlotHeader + payload;
  const size_t size = kHeaderSize + size_t(slots) * slot_size;
  // Built under a temporary name, then renamed into place in one step: a
  // producer sees either no ring, the old (dead) one, or this one complete.
  static std::atomic<uint32_t> seq{0};
  const std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(seq.fetch_add(1));
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return sys_error(tmp, "open", errno);
  std::unique_ptr<ShmRing> r(new ShmRing());
  r->path_ = path;
  auto fail = [&](const char* what, int e) {
    ::unlink(tmp.c_str());
    return sys_error(tmp, what, e);
  };
  // Allocated now, not at the first touch: on a full tmpfs (a container's
  // 64 MiB /dev/shm) a page of a merely truncated file would fault with
  // SIGBUS when written; this fails with ENOSPC instead (UDP is used).
  int e;
  while ((e = ::posix_fallocate(fd.get(), 0, off_t(size))) == EINTR) {  // tmpfs stops for a pending signal
  }
  if (e != 0) return fail("posix_fallocate", e);
  if (Status s = r->map(fd.get(), size, true); !s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  // The file is zero-filled: every slot word is FREE(0), the tail 0.
  Header* h = new (r->map_) Header();
  h->version = kVersion;
  h->slots = slots;
  h->slot_size = uint32_t(slot_size);
  h->payload_max = uint32_t(payload);
  h->owner_pid = int32_t(::getpid());
  const auto me = proc_stat(0);
  h->owner_start = me ? me->start : 0;
  for (size_t i = 0; i < opt.user.size(); ++i) h->user[i].store(opt.user[i], kRlx);
  h->magic.store(kMagic, kRel);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail("fstat", errno);
  if (opt.exclusive) {
    if (::link(tmp.c_str(), path.c_str()) != 0) return fail("link", errno);
    ::unlink(tmp.c_str());
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail("rename", errno);
  }
  r->ino_ = st.st_ino;
  r->dev_ = st.st_dev;
  r->owner_ = true;
  r->hdr_ = h;
  r->slots_ = slots;
  r->shift_ = uint32_t(std::countr_zero(slots));
  r->slot_size_ = slot_size;
  r->payload_max_ = payload;
  r->slots_base_ = static_cast<uint8_t*>(r->map_) + kHeaderSize;
  r->stall_dead_ = opt.stall_dead;
  r->stall_max_ = opt.stall_max;
  r->pid_ = ::getpid();
  return r;
}

Result<std::unique_ptr<ShmRing>> ShmRing::attach(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return sys_error(path, "open", errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error(path, "fstat", errno);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077))
    return err::access("shm ring " + path + ": not a regular file of ours with mode 0600");
  Header h;
  if (!read_header(fd.get(), st, h)) return err::inval("shm ring " + path + ": not a valid ring");
  if (h.closed.load(kRlx) || !process_alive(h.owner_pid, h.owner_start))
    return err::from_errno(ESTALE, "shm ring " + path + ": its owner is gone");
  std::unique_ptr<ShmRing> r(new ShmRing());
  r->path_ = path;
  UROCE_TRY(r->map(fd.get(), size_t(st.st_size), true));
  r->ino_ = st.st_ino;
  r->dev_ = st.st_dev;
  r->hdr_ = static_cast<Header*>(r->map_);
  r->slots_ = h.slots;
  r->shift_ = uint32_t(std::countr_zero(h.slots));
  r->slot_size_ = h.slot_size;
  r->payload_max_ = h.payload_max;
  r->slots_base_ = static_cast<uint8_t*>(r->map_) + kHeaderSize;
  r->pid_ = ::getpid();
  return r;
}

Status ShmRing::map(int fd, size_t size, bool populate) {
  void* m = own_mappings::map(size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (m == MAP_FAILED) return sys_error(path_, "mmap", errno);
  map_ = m;
  size_ = size;
  return {};
}

namespace {
std::mutex g_local_mu;
std::map<std::string, std::weak_ptr<ShmRing>>& locals() {
  static auto* m = new std::map<std::string, std::weak_ptr<ShmRing>>;
  return *m;
}
}  // namespace

void ShmRing::publish_local(const std::shared_ptr<ShmRing>& ring) {
  if (!ring || !ring->owner_) return;
  std::lock_guard g(g_local_mu);
  locals()[ring->path_] = ring;
}

std::shared_ptr<ShmRing> ShmRing::local(const std::string& path) {
  std::lock_guard g(g_local_mu);
  auto it = locals().find(path);
  if (it == locals().end()) return nullptr;
  auto r = it->second.lock();
  // Not in a forked child: it is another process, which maps for itself.
  if (!r || r->closed() || r->pid_ != ::getpid()) return nullptr;
  return r;
}

void ShmRing::close() noexcept {
  if (!owner_ || closed_ || !hdr_) return;
  closed_ = true;
  hdr_->closed.store(1, kRel);
  // Our file still, unless a successor replaced it (then it is theirs).
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0 && uint64_t(st.st_ino) == ino_ && uint64_t(st.st_dev) == dev_)
    ::unlink(path_.c_str());
  std::lock_guard g(g_local_mu);
  auto it = locals().find(path_);
  if (it != locals().end() && (it->second.expired() || it->second.lock().get() == this)) locals().erase(it);
}

ShmRing::~ShmRing() {
  close();
  if (map_) own_mappings::unmap(map_, size_);
}

size_t ShmRing::clean_stale(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  const std::string pre = prefix();
  size_t removed = 0;
  static std::atomic<uint32_t> seq{0};
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (!name.starts_with(pre) || !name.ends_with(".ring")) continue;
    const std::string path = dir + "/" + std::string(name);
    auto stale = [](const std::string& p) {
      UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      struct stat st;
      if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || st.st_uid != ::geteuid()) return false;
      Header h;
      if (!read_header(fd.get(), st, h)) return false;  // not ours to judge
      return h.closed.load(kRlx) != 0 || !process_alive(h.owner_pid, h.owner_start);
    };
    if (!stale(path)) continue;
    // Move it aside first and judge again: a new owner may have renamed its
    // fresh ring onto this name meanwhile; then it goes back.
    const std::string aside = path + ".stale" + std::to_string(::getpid()) + "." + std::to_string(seq.fetch_add(1));
    if (::rename(path.c_str(), aside.c_str()) != 0) continue;
    if (stale(aside)) {
      ::unlink(aside.c_str());
      ++removed;
    } else {
      (void)::rename(aside.c_str(), path.c_str());
    }
  }
  ::closedir(d);
  return removed;
}

bool ShmRing::owner_alive() const noexcept { return !closed() && process_alive(hdr_->owner_pid, hdr_->owner_start); }

// ----------------------------------------------------------------- producer

uint64_t ShmRing::put_begin() noexcept {
  uint64_t t = hdr_->tail.load(kAcq);
  for (;;) {
    SlotHead& s = slot_at(t);
    const uint64_t lap = t >> shift_;
    uint64_t w = s.word.load(kAcq);
    const uint64_t wlap = lap_of(w);
    if (wlap == lap && state_of(w) == State::free) {
      if (s.word.compare_exchange_strong(w, word(lap, State::writing, uint64_t(pid_)), kAcq, kRlx)) {
        uint64_t expect = t;
        hdr_->tail.compare_exchange_strong(expect, t + 1, kRel, kRlx);
        return t;
      }
      continue;  // somebody else took it: look again
    }
    if (wlap == lap) {  // reserved for this position already: help the tail on
      uint64_t expect = t;
      if (hdr_->tail.compare_exchange_strong(expect, t + 1, kAcq, kAcq))
        t = t + 1;
      else
        t = expect;
      continue;
    }
    if (wlap < lap) return UINT64_MAX;  // the slot still holds the previous lap: full
    t = hdr_->tail.load(kAcq);          // our tail was stale
  }
}

ShmRing::Put ShmRing::put_commit(uint64_t pos) noexcept {
  SlotHead& s = slot_at(pos);
  const uint64_t lap = pos >> shift_;
  uint64_t expect = word(lap, State::writing, uint64_t(pid_));
  if (s.word.compare_exchange_strong(expect, word(lap, State::ready), kSc, kRlx)) return Put::ok;
  // The consumer skipped us: the slot is ours to free.
  expect = word(lap, State::skipped, uint64_t(pid_));
  s.word.compare_exchange_strong(expect, word(lap + 1, State::free), kRel, kRlx);
  return Put::lost;
}

ShmRing::Put ShmRing::put(const ShmMeta& m, std::span<const uint8_t> head, std::span<const uint8_t> body,
                          std::span<const uint8_t> tail) noexcept {
  if (head.size() + body.size() + tail.size() > payload_max_) return Put::too_big;
  const uint64_t pos = put_begin();
  if (pos == UINT64_MAX) return Put::full;
  SlotHead& s = slot_at(pos);
  write_meta(s, m, 0);
  s.len = uint16_t(head.size() + body.size() + tail.size());
  uint8_t* p = payload_at(pos);
  if (!head.empty()) std::memcpy(p, head.data(), head.size());
  // The body may be application memory, unmapped since the packet was
  // built: the slot then goes out empty (the receiver drops it as
  // malformed), as a NIC's DMA read error loses the packet.
  if (!body.empty() && !fault_guard::copy(p + head.size(), body.data(), body.size(), body.data())) {
    s.len = 0;
    return put_commit(pos);
  }
  if (!tail.empty()) std::memcpy(p + head.size() + body.size(), tail.data(), tail.size());
  return put_commit(pos);
}

void ShmRing::write_meta(SlotHead& s, const ShmMeta& m, uint8_t flags) noexcept {
  std::memcpy(s.src, m.src.addr.bytes().data(), 16);
  std::memcpy(s.dst, m.dst.bytes().data(), 16);
  s.src_port = m.src.port;
  s.ipv4_id_hint = m.ipv4_id_hint;
  s.tos = m.tos;
  s.ttl = m.ttl;
  s.flags = uint8_t(flags | (m.icrc_omitted ? shm::kSlotNoIcrc : 0));
}

ShmRing::Put ShmRing::put_packed(const ShmMeta& m, std::span<const Part> parts) noexcept {
  size_t total = 0;
  for (const Part& part : parts) total += shm::kRecordHeader + part.size();
  if (parts.size() < 2 || parts.size() > shm::kMaxPacked || total > payload_max_) return Put::too_big;
  const uint64_t pos = put_begin();
  if (pos == UINT64_MAX) return Put::full;
  SlotHead& s = slot_at(pos);
  write_meta(s, m, shm::kSlotPacked);
  s.ipv4_id_hint = parts[0].ipv4_id_hint;
  uint8_t* p = payload_at(pos);
  size_t off = 0;
  for (const Part& part : parts) {
    uint8_t* rec = p + off + shm::kRecordHeader;
    uint16_t len = uint16_t(part.size());
    if (!part.head.empty()) std::memcpy(rec, part.head.data(), part.head.size());
    // (Application memory, as in put(): a body that went away leaves an
    // empty record, which the receiver drops as malformed.)
    if (!part.body.empty() &&
        !fault_guard::copy(rec + part.head.size(), part.body.data(), part.body.size(), part.body.data()))
      len = 0;
    if (len != 0 && !part.tail.empty())
      std::memcpy(rec + part.head.size() + part.body.size(), part.tail.data(), part.tail.size());
    const uint16_t words[2] = {len, part.ipv4_id_hint};
    std::memcpy(p + off, words, sizeof words);
    off += shm::kRecordHeader + len;
  }
  s.len = uint16_t(off);
  return put_commit(pos);
}

bool ShmRing::need_doorbell() noexcept {
  if (hdr_->sleepers.load(kSc) == 0) return false;
  // Sequentially consistent, as rearm_bell()'s store: a consumer that
  // re-armed and then found our slot empty must not meet a stale 1 here.
  return hdr_->bell.load(kSc) == 0 && hdr_->bell.exchange(1, kSc) == 0;
}

// ----------------------------------------------------------------- consumer

bool ShmRing::prepare_sleep() noexcept {
  hdr_->bell.store(0, kRlx);
  hdr_->sleepers.fetch_add(1, kSc);
  return waiting();
}

bool ShmRing::waiting() const noexcept {
  const uint64_t h = head_.load(kAcq);
  const uint64_t w = slot_at(h).word.load(kSc);
  // Anything but "free for our position" may need us (a WRITING slot too:
  // its producer may be dead and only we can skip it).
  return w != word(h >> shift_, State::free);
}

void ShmRing::end_sleep() noexcept { hdr_->sleepers.fetch_sub(1, kRel); }

void ShmRing::rearm_bell() noexcept {
  // Sequentially consistent, as need_doorbell()'s load and the caller's next
  // look at the slots (waiting()): if that look misses a producer's publish,
  // the producer's later read of the latch sees this store.  (No fence:
  // ThreadSanitizer does not model them.)
  hdr_->bell.store(0, kSc);
}

bool ShmRing::take_packed(SlotHead& s, std::span<RxPacket> out, size_t& n) noexcept {
  const size_t len = std::min<size_t>(s.len, payload_max_);
  uint8_t* base = reinterpret_cast<uint8_t*>(&s) + kSlotHeader;
  // Written by another process of our user: checked as a packet from the
  // network would be.  A record that runs past the slot is handed out as
  // truncated (the engine counts and drops it), and ends the slot.
  while (packed_off_ + shm::kRecordHeader <= len) {
    if (n == out.size()) return false;
    uint16_t words[2];
    std::memcpy(words, base + packed_off_, sizeof words);
    const size_t at = packed_off_ + shm::kRecordHeader;
    const size_t rec = std::min<size_t>(words[0], len - at);
    RxPacket& pkt = out[n++];
    pkt.data = {base + at, rec};
    pkt.src = Endpoint{IpAddr::from_bytes(s.src), s.src_port};
    pkt.dst = IpAddr::from_bytes(s.dst);
    pkt.tos = s.tos;
    pkt.ttl = s.ttl;
    pkt.truncated = words[0] > len - at;
    pkt.ipv4_id_hint = words[1];
    pkt.via_ring = true;
    pkt.icrc_omitted = (s.flags & shm::kSlotNoIcrc) != 0;
    packed_off_ = pkt.truncated ? len : at + rec;
  }
  packed_off_ = 0;
  return true;
}

size_t ShmRing::take(std::span<RxPacket> out) noexcept {
  uint64_t h = head_.load(kRlx);
  for (uint64_t p = h - held_; p != h; ++p) {
    SlotHead& s = slot_at(p);
    s.flags = 0;  // (a producer older than the flags never writes them)
    s.word.store(word((p >> shift_) + 1, State::free), kRel);
  }
  held_ = 0;
  size_t n = 0;
  uint64_t bytes = 0, skipped = skipped_;
  while (n < out.size()) {
    SlotHead& s = slot_at(h);
    const uint64_t lap = h >> shift_;
    uint64_t w = s.word.load(kAcq);
    if (w == word(lap, State::ready) && (s.flags & shm::kSlotPacked) != 0) {
      if (!take_packed(s, out, n)) break;  // out is full: the rest at the next take
      bytes += std::min<size_t>(s.len, payload_max_);
      ++h;
      ++held_;
      stall_pos_ = UINT64_MAX;
      continue;
    }
    if (w == word(lap, State::ready)) {
      RxPacket& pkt = out[n];
      const size_t len = std::min<size_t>(s.len, payload_max_);
      pkt.data = {reinterpret_cast<uint8_t*>(&s) + kSlotHeader, len};
      pkt.src = Endpoint{IpAddr::from_bytes(s.src), s.src_port};
      pkt.dst = IpAddr::from_bytes(s.dst);
      pkt.tos = s.tos;
      pkt.ttl = s.ttl;
      pkt.truncated = s.len > payload_max_;
      pkt.ipv4_id_hint = s.ipv4_id_hint;
      pkt.via_ring = true;
      pkt.icrc_omitted = (s.flags & shm::kSlotNoIcrc) != 0;
      bytes += len;
      ++n;
      ++h;
      ++held_;
      stall_pos_ = UINT64_MAX;
      continue;
    }
    if (w == word(lap, State::free)) break;  // empty
    const State st = state_of(w);
    const bool ours_now = lap_of(w) == lap && st == State::writing;      // a producer is late
    const bool old_skip = lap_of(w) + 1 == lap && st == State::skipped;  // last lap's, never freed
    if (!ours_now && !old_skip) break;                                   // cannot happen in a sane ring: wait
    const Clock::time_point now = Clock::now();
    if (stall_pos_ != h || stall_word_ != w) {  // a new stall: start the clock
      stall_pos_ = h;
      stall_word_ = w;
      stall_since_ = now;
      break;
    }
    const Clock::duration waited = now - stall_since_;
    const bool dead = waited >= stall_dead_ && pid_dead(pid_of(w));
    if (!dead && waited < stall_max_) break;
    if (ours_now) {
      // A dead producer's slot is free at once; a live one frees it itself.
      const uint64_t to = dead ? word(lap + 1, State::free) : word(lap, State::skipped, uint64_t(pid_of(w)));
      if (!s.word.compare_exchange_strong(w, to, kAcqRel, kRlx)) continue;  // published meanwhile
      ++skipped;
      ++h;
      UROCE_LOG(debug, "shm ring %s: skipped a slot its producer (pid %d) did not publish in time", path_.c_str(),
                int(pid_of(w)));
    } else {
      if (!s.word.compare_exchange_strong(w, word(lap, State::free), kAcqRel, kRlx)) continue;
    }
    stall_pos_ = UINT64_MAX;
  }
  if (n > 0 || skipped != skipped_) {
    head_.store(h, kRel);  // (an empty poll leaves it, and its cache line, alone)
    rx_packets_ += n;
    rx_bytes_ += bytes;
    skipped_ = skipped;
    hdr_->rx_packets.store(rx_packets_, kRlx);
    hdr_->rx_bytes.store(rx_bytes_, kRlx);
    hdr_->skipped.store(skipped_, kRlx);
  }
  return n;
}

}  // namespace uroce::net
