#include "net/registry.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/own_mappings.hpp"
#include "net/addr_words.hpp"
#include "net/proc_info.hpp"
#include "net/registry_layout.hpp"
#include "net/runtime_dir.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace {

using registry::Binding;

Status sys_error(const std::string& path, const char* what, int e = errno) {
  return err::from_errno(e, "registry " + path + ": " + what + ": " + std::strerror(e));
}

struct BindingView {
  uint32_t port;
  uint64_t owner, netns;
  IpAddr addr;
};

// Seqlock read; false if a writer kept it busy (or died mid-write).  The
// fields are read with acquire (no fence: TSan does not model fences): a
// field stored by a newer write makes that write's odd seq visible to the
// second seq load, which then differs.
bool read_binding(const Binding& b, BindingView& v) {
  constexpr auto acq = std::memory_order_acquire;
  for (int tries = 0; tries < 100; ++tries) {
    const uint32_t s = b.seq.load(acq);
    if (s & 1) continue;
    v.port = b.port.load(acq);
    v.owner = b.owner.load(acq);
    v.netns = b.netns.load(acq);
    const uint64_t hi = b.addr_hi.load(acq);
    const uint64_t lo = b.addr_lo.load(acq);
    if (b.seq.load(std::memory_order_relaxed) != s) continue;
    v.addr = addr_from_halves(hi, lo);
    return true;
  }
  return false;
}

// Only the slot's owner writes (serialised by its write_mu_).  Release
// stores keep the odd seq ahead of every field.
void write_binding(Binding& b, uint32_t port, uint64_t owner, uint64_t netns, const IpAddr& a) {
  constexpr auto rel = std::memory_order_release;
  const uint32_t s = b.seq.load(std::memory_order_relaxed);
  const uint32_t w = s + 1 + (s & 1);  // odd, even if a dead writer left it odd
  b.seq.store(w, std::memory_order_relaxed);
  b.port.store(port, rel);
  b.owner.store(owner, rel);
  b.netns.store(netns, rel);
  b.addr_hi.store(addr_half(a, 0), rel);
  b.addr_lo.store(addr_half(a, 1), rel);
  b.seq.store(w + 1, rel);
}

struct Singleton {
  std::mutex mu;
  std::shared_ptr<HostRegistry> reg;
  std::atomic<HostRegistry*> at_exit{nullptr};
};
Singleton& singleton() {
  static Singleton* s = new Singleton();  // never destroyed: used by the exit handler
  return *s;
}

}  // namespace

Result<std::string> HostRegistry::default_path() {
  const char* env = std::getenv("UROCE_REGISTRY");
  if (env && *env) return std::string(env);
  auto dir = runtime_dir();
  if (!dir) return dir.status();
  return *dir + "/registry";
}

Result<std::shared_ptr<HostRegistry>> HostRegistry::instance() {
  Singleton& s = singleton();
  std::lock_guard lk(s.mu);
  if (s.reg && s.reg->pid_ == ::getpid()) return s.reg;
  auto path = default_path();
  if (!path) return path.status();
  auto r = open(*path);
  if (!r) return r.status();
  s.reg = *r;
  static const bool registered = std::atexit([] {
                                   if (HostRegistry* r = singleton().at_exit.load()) r->release();
                                 }) == 0;
  (void)registered;
  s.at_exit.store(s.reg.get());
  return s.reg;
}

Result<std::shared_ptr<HostRegistry>> HostRegistry::open(const std::string& path) {
  std::shared_ptr<HostRegistry> reg(new HostRegistry());
  reg->path_ = path;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return sys_error(path, "open");
  // Everyone initialises or checks the header under the lock, so the first
  // process's initialisation is seen complete by all others.
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR) return sys_error(path, "flock");
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error(path, "fstat");
  if (!S_ISREG(st.st_mode)) return err::inval("registry " + path + ": not a regular file");
  if (st.st_uid != ::geteuid())
    return err::access("registry " + path + ": owned by uid " + std::to_string(st.st_uid) + ", not by us (uid " +
                       std::to_string(::geteuid()) + ")");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return err::access("registry " + path + ": mode " + mode + " gives others access");
  }
  if (st.st_size == 0) {
    (void)::fchmod(fd.get(), 0600);  // whatever the umask made of it
    if (int e = ::posix_fallocate(fd.get(), 0, registry::kFileSize); e != 0)
      return sys_error(path, "posix_fallocate", e);
  } else if (size_t(st.st_size) != registry::kFileSize) {
    return err::from_errno(EPROTO, "registry " + path + ": size " + std::to_string(st.st_size) + ", expected " +
                                       std::to_string(registry::kFileSize) + " (another uroce version?)");
  }
  void* p = own_mappings::map(registry::kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return sys_error(path, "mmap");
  reg->file_ = static_cast<registry::File*>(p);

  registry::Header& h = reg->file_->header;
  if (h.magic.load(std::memory_order_acquire) == 0) {  // new (or its creator died mid-way)
    h.version = registry::kVersion;
    h.slots = registry::kSlots;
    for (size_t got = 0; got < sizeof h.secret;) {
      ssize_t n = ::getrandom(h.secret + got, sizeof h.secret - got, 0);
      if (n < 0 && errno != EINTR) return sys_error(path, "getrandom");
      if (n > 0) got += size_t(n);
    }
    h.magic.store(registry::kMagic, std::memory_order_release);
  } else if (h.magic.load() != registry::kMagic || h.version != registry::kVersion) {
    return err::from_errno(
        EPROTO, "registry " + path + ": not a uroce registry of version " + std::to_string(registry::kVersion));
  }
  std::memcpy(reg->secret_.data(), h.secret, sizeof h.secret);
  ::flock(fd.get(), LOCK_UN);

  UROCE_TRY(reg->claim());
  return reg;
}

Status HostRegistry::claim() {
  auto self = proc_stat(0);
  if (!self) return err::io("registry " + path_ + ": cannot read /proc/self/stat");
  pid_ = ::getpid();
  pidns_ = ns_inode("pid");
  me_ = registry::owner_word(uint32_t(pid_), self->start);
  for (uint32_t s = 1; s < registry::kSlots; ++s) {
    registry::Slot& sl = file_->slots[s];
    uint64_t cur = sl.owner.load(std::memory_order_acquire);
    if (cur != 0 && owner_alive(cur, sl.pidns.load(std::memory_order_acquire))) continue;
    if (!sl.owner.compare_exchange_strong(cur, me_, std::memory_order_acq_rel)) continue;
    sl.pidns.store(pidns_, std::memory_order_release);
    for (Binding& b : sl.bindings)
      if (b.port.load(std::memory_order_relaxed) != 0 || (b.seq.load() & 1)) write_binding(b, 0, 0, 0, IpAddr{});
    slot_ = s;
    return {};
  }
  return err::from_errno(ENOSPC, "registry " + path_ + ": all " + std::to_string(registry::kSlots - 1) +
                                     " slots are held by live processes");
}

bool HostRegistry::owner_alive(uint64_t word, uint64_t pidns) const {
  if (word == me_ && ::getpid() == pid_) return true;
  // Being claimed or released, or a pid of another pid namespace: not ours
  // to judge, so taken as alive.
  if (pidns == 0 || pidns != pidns_) return true;
  const pid_t pid = pid_t(registry::owner_pid(word));
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  auto st = proc_stat(pid);
  // Unreadable while the pid exists (out of descriptors, say): not proof of
  // death, and taking a live process for dead would give its place away.
  if (!st) return ::kill(pid, 0) == 0 || errno != ESRCH;
  if (st->state == 'Z' || st->state == 'X') return false;         // a zombie
  return registry::owner_word(uint32_t(pid), st->start) == word;  // else the pid was reused
}

bool HostRegistry::alive(uint32_t slot) const {
  if (slot == 0 || slot >= registry::kSlots) return false;
  const registry::Slot& sl = file_->slots[slot];
  const uint64_t owner = sl.owner.load(std::memory_order_acquire);
  return owner != 0 && owner_alive(owner, sl.pidns.load(std::memory_order_acquire));
}

bool HostRegistry::holds(uint32_t slot, uint64_t word) const {
  if (slot == 0 || slot >= registry::kSlots || word == 0) return false;
  const registry::Slot& sl = file_->slots[slot];
  return sl.owner.load(std::memory_order_acquire) == word &&
         owner_alive(word, sl.pidns.load(std::memory_order_acquire));
}

void HostRegistry::release() noexcept {
  std::lock_guard lk(write_mu_);
  if (released_ || !file_ || slot_ == 0 || ::getpid() != pid_) return;
  registry::Slot& sl = file_->slots[slot_];
  for (Binding& b : sl.bindings)
    if (b.port.load(std::memory_order_relaxed) != 0) write_binding(b, 0, 0, 0, IpAddr{});
  sl.pidns.store(0, std::memory_order_release);
  uint64_t expected = me_;
  sl.owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  released_ = true;
}

HostRegistry::~HostRegistry() {
  release();
  if (file_) own_mappings::unmap(file_, registry::kFileSize);
}

Status HostRegistry::publish(const IpAddr& addr, uint16_t port) {
  if (port == 0) return err::inval("registry: cannot publish port 0 for " + addr.to_string());
  std::lock_guard lk(write_mu_);
  if (released_ || ::getpid() != pid_)
    return err::perm("registry " + path_ + ": slot " + std::to_string(slot_) + " is not ours");
  const uint64_t ns = ns_inode("net");
  registry::Slot& sl = file_->slots[slot_];
  Binding* free = nullptr;
  for (Binding& b : sl.bindings) {
    const bool mine = b.port.load(std::memory_order_relaxed) != 0 && b.owner.load(std::memory_order_relaxed) == me_;
    if (mine && b.netns.load(std::memory_order_relaxed) == ns &&
        addr_from_halves(b.addr_hi.load(), b.addr_lo.load()) == addr) {
      write_binding(b, port, me_, ns, addr);
      return {};
    }
    if (!mine && !free) free = &b;
  }
  if (!free)
    return err::from_errno(ENOSPC, "registry: slot " + std::to_string(slot_) + " has all " +
                                       std::to_string(kMaxBindings) + " bindings in use");
  write_binding(*free, port, me_, ns, addr);
  return {};
}

Status HostRegistry::unpublish(const IpAddr& addr, uint16_t port) {
  std::lock_guard lk(write_mu_);
  if (!released_ && ::getpid() == pid_) {
    const uint64_t ns = ns_inode("net");
    for (Binding& b : file_->slots[slot_].bindings) {
      if (b.port.load() == port && b.owner.load() == me_ && b.netns.load() == ns &&
          addr_from_halves(b.addr_hi.load(), b.addr_lo.load()) == addr) {
        write_binding(b, 0, 0, 0, IpAddr{});
        return {};
      }
    }
  }
  return err::noent("registry: " + Endpoint{addr, port}.to_string() + " is not published");
}

std::optional<uint16_t> HostRegistry::lookup_port(uint32_t slot, const IpAddr& addr) const {
  if (slot == 0 || slot >= registry::kSlots) return std::nullopt;
  const registry::Slot& sl = file_->slots[slot];
  const uint64_t owner = sl.owner.load(std::memory_order_acquire);
  if (owner == 0) return std::nullopt;
  const uint64_t ns = ns_inode("net");
  const IpAddr any = addr.is_v4() ? IpAddr::from_v4(0) : IpAddr{};
  std::optional<uint16_t> exact, wildcard;
  for (const Binding& b : sl.bindings) {
    BindingView v;
    if (!read_binding(b, v) || v.port == 0 || v.owner != owner || v.netns != ns) continue;
    if (v.addr == addr)
      exact = uint16_t(v.port);
    else if (v.addr == any)
      wildcard = uint16_t(v.port);
  }
  std::optional<uint16_t> port = exact ? exact : wildcard;
  if (!port || !owner_alive(owner, sl.pidns.load(std::memory_order_acquire))) return std::nullopt;
  if (sl.owner.load(std::memory_order_acquire) != owner) return std::nullopt;  // changed hands
  return port;
}

}  // namespace uroce::net
