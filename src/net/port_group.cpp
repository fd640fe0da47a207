#include "net/port_group.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "common/log.hpp"
#include "common/own_mappings.hpp"
#include "common/quiet_thread.hpp"
#include "net/addr_words.hpp"
#include "net/listener_table.hpp"
#include "net/proc_info.hpp"
#include "net/registry.hpp"

namespace uroce::net {
namespace ports {

inline constexpr uint64_t kMagic = 0x53545250454f5255ULL;  // "UROEPRTS" in memory order
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kGroups = 64;

struct Member {
  uint64_t owner;  // registry owner word of the process holding the position; 0 = free
  uint32_t slot;
  uint32_t reserved;
};

struct Group {
  uint64_t netns;
  uint64_t addr_hi, addr_lo;
  uint32_t port;
  uint32_t reserved;
  Member members[PortGroup::kPositions];
};

struct File {
  uint64_t magic;
  uint32_t version, groups;
  uint8_t reserved[48];
  Group group[kGroups];
};

}  // namespace ports

namespace {

// The groups of this process (steer_all, after_fork_in_child).  The mutex
// is made anew in a forked child, where a thread of the parent may have
// held it (in place: nothing to leak).
alignas(std::mutex) unsigned char g_groups_mu_storage[sizeof(std::mutex)];
std::mutex* g_groups_mu = new (g_groups_mu_storage) std::mutex;
std::mutex& groups_mu() { return *g_groups_mu; }
std::vector<PortGroup*>& groups() {
  static auto* v = new std::vector<PortGroup*>;
  return *v;
}

Status sys_error(const std::string& what, int e = errno) {
  return err::from_errno(e, "port group: " + what + ": " + std::strerror(e));
}

// The abstract Unix socket of the member in `slot`.
socklen_t server_name(sockaddr_un& a, const Endpoint& at, uint64_t netns, uint32_t slot) {
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "uroce-port-%u-%llx-%s-%u", unsigned(::geteuid()),
                              static_cast<unsigned long long>(netns), at.to_string().c_str(), slot);
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

bool peer_is_us(int fd) {
  ucred c{};
  socklen_t len = sizeof c;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) == 0 && c.uid == ::geteuid();
}

// Whether `fd` is a UDP socket bound to `at` in an SO_REUSEPORT group.
bool is_group_socket(int fd, const Endpoint& at) {
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  auto e = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  int reuse = 0;
  socklen_t rl = sizeof reuse;
  return e && *e == at && ::getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &rl) == 0 && reuse;
}

}  // namespace

Status PortGroup::lock() noexcept {
  while (::flock(file_fd_.get(), LOCK_EX) != 0)
    if (errno != EINTR) return sys_error("flock " + path_);
  return {};
}

void PortGroup::unlock() noexcept { (void)::flock(file_fd_.get(), LOCK_UN); }

bool PortGroup::live(uint32_t i) const noexcept {
  const ports::Member& m = file_->group[group_].members[i];
  return m.owner != 0 && reg_->holds(m.slot, m.owner);
}

Result<std::unique_ptr<PortGroup>> PortGroup::join(std::shared_ptr<HostRegistry> reg, const Endpoint& at,
                                                   const Configure& configure) {
  // EAGAIN: a member is leaving, or dying, and holds what we need until it
  // is gone (it needs the table's lock for that, so we wait without it).
  const auto deadline = std::chrono::steady_clock::now() + kJoinPatience;
  std::chrono::milliseconds pause{2};
  while (true) {
    auto g = join_locked(reg, at, configure);
    if (g.ok()) {  // after the table's lock: steer_all() takes the two the other way round
      std::lock_guard lg(groups_mu());
      groups().push_back(g->get());
      return g;
    }
    if (g.status().code() != EAGAIN || std::chrono::steady_clock::now() + pause > deadline) return g;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds{100});
  }
}

Result<std::unique_ptr<PortGroup>> PortGroup::join_locked(std::shared_ptr<HostRegistry> reg, const Endpoint& at,
                                                          const Configure& configure) {
  std::unique_ptr<PortGroup> g(new PortGroup());
  g->reg_ = std::move(reg);
  g->at_ = at;
  g->netns_ = ns_inode("net");
  g->path_ = g->reg_->path() + ".ports";
  g->file_fd_.reset(::open(g->path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!g->file_fd_.valid()) return sys_error("open " + g->path_);
  UROCE_TRY(g->lock());
  struct Unlock {
    PortGroup* g;
    ~Unlock() { g->unlock(); }
  } unlock{g.get()};
  struct stat st;
  if (::fstat(g->file_fd_.get(), &st) != 0) return sys_error("fstat " + g->path_);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077))
    return err::access("port group table " + g->path_ + ": not a private file of ours");
  if (st.st_size == 0) {
    if (int e = ::posix_fallocate(g->file_fd_.get(), 0, sizeof(ports::File)); e != 0)
      return sys_error("posix_fallocate " + g->path_, e);
  } else if (size_t(st.st_size) != sizeof(ports::File)) {
    return err::from_errno(EPROTO, "port group table " + g->path_ + ": another uroce version's");
  }
  void* p = own_mappings::map(sizeof(ports::File), PROT_READ | PROT_WRITE, MAP_SHARED, g->file_fd_.get(), 0);
  if (p == MAP_FAILED) return sys_error("mmap " + g->path_);
  g->file_ = static_cast<ports::File*>(p);
  ports::File& f = *g->file_;
  if (f.magic == 0) {
    f.version = ports::kVersion;
    f.groups = ports::kGroups;
    f.magic = ports::kMagic;
  } else if (f.magic != ports::kMagic || f.version != ports::kVersion) {
    return err::from_errno(EPROTO, "port group table " + g->path_ + ": another uroce version's");
  }

  // Our group's entry: the one for this namespace, address and port, else
  // one no live process uses.
  const uint64_t hi = addr_half(at.addr, 0), lo = addr_half(at.addr, 1);
  int mine = -1, spare = -1;
  for (uint32_t i = 0; i < ports::kGroups && mine < 0; ++i) {
    ports::Group& gr = f.group[i];
    g->group_ = i;
    bool any_live = false;
    for (uint32_t k = 0; k < kPositions && !any_live; ++k) any_live = g->live(k);
    if (gr.netns == g->netns_ && gr.addr_hi == hi && gr.addr_lo == lo && gr.port == at.port)
      mine = int(i);
    else if (!any_live && spare < 0)
      spare = int(i);
  }
  if (mine < 0) {
    if (spare < 0) return err::from_errno(ENOSPC, "port group table " + g->path_ + ": full");
    mine = spare;
    ports::Group& gr = f.group[mine];
    std::memset(&gr, 0, sizeof gr);
    gr.netns = g->netns_;
    gr.addr_hi = hi;
    gr.addr_lo = lo;
    gr.port = at.port;
  }
  g->group_ = uint32_t(mine);

  bool any_live = false, any_held = false;
  for (uint32_t k = 0; k < kPositions; ++k) {
    any_live |= g->live(k);
    any_held |= f.group[mine].members[k].owner != 0;
  }
  if (any_live) {
    UROCE_TRY(g->fetch());
  } else if (Status s = g->found(configure); !s.ok()) {
    // A member that died (not yet reaped, or its descriptors not yet
    // closed) may still hold the sockets, ours: worth another try.
    if (s.code() == EADDRINUSE && any_held && std::ranges::count(udp_port_holders(at.addr, at.port), ::geteuid()))
      return err::from_errno(EAGAIN, std::string(s.message()));
    return s;
  }
  UROCE_TRY(g->claim());
  UROCE_TRY(g->start_serving());
  std::lock_guard lg(g->steer_mu_);
  UROCE_TRY(g->steer_locked());
  return g;
}

// Binds the group's sockets, in order: position i is the i-th to join.
// Only on a free port: sockets of ours already there (a group of another
// registry, for another UROCE_RUNTIME_DIR, or any other program's) would
// put ours at other indexes than the positions we number.
// The founding lock of `at` for every founder of our uid in our network
// namespace, whatever its registry: an abstract Unix socket bound while
// founding (the kernel frees it if we die).  Invalid if it stayed taken
// for kFoundPatience (a founder binds 32 sockets in well under that).
static UniqueFd take_found_lock(const Endpoint& at, uint64_t netns) {
  constexpr auto kFoundPatience = std::chrono::seconds(2);
  sockaddr_un a;
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "uroce-found-%u-%llx-%s", unsigned(::geteuid()),
                              static_cast<unsigned long long>(netns), at.to_string().c_str());
  const socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
  const auto deadline = std::chrono::steady_clock::now() + kFoundPatience;
  while (true) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return fd;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) == 0) return fd;
    if (errno != EADDRINUSE || std::chrono::steady_clock::now() > deadline) return UniqueFd();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status PortGroup::found(const Configure& configure) {
  // Our table's lock serialises the founders of our registry only, and the
  // kernel puts every SO_REUSEPORT socket of our uid on the port into one
  // group: two founders of different registries (another UROCE_REGISTRY or
  // runtime directory) that both found the port free would share a kernel
  // group whose socket order neither table knows, and a failed founder's
  // sockets, leaving it, would reorder the other's.  So the probe and the
  // binds are one step for every founder of the address.
  const UniqueFd lock = take_found_lock(at_, netns_);
  if (!lock.valid()) return err::from_errno(EAGAIN, "port group: another founder of " + at_.to_string() + " holds on");
  {
    UniqueFd probe(::socket(at_.addr.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP));
    sockaddr_storage ss;
    if (!probe.valid()) return sys_error("socket");
    if (::bind(probe.get(), reinterpret_cast<sockaddr*>(&ss), at_.to_sockaddr(ss)) != 0)
      return sys_error("bind " + at_.to_string() + " (held outside this registry's group)");
  }
  ports::Group& gr = file_->group[group_];
  std::memset(gr.members, 0, sizeof gr.members);
  socks_.clear();
  for (uint32_t i = 0; i < kPositions; ++i) {
    UniqueFd fd(
        ::socket(at_.addr.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
    if (!fd.valid()) return sys_error("socket");
    const int one = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) return sys_error("SO_REUSEPORT");
    if (configure) UROCE_TRY(configure(fd.get()));
    sockaddr_storage ss;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), at_.to_sockaddr(ss)) != 0) {
      const Status st = sys_error("bind " + at_.to_string());
      socks_.clear();  // out of the kernel's group before the founding lock goes
      return st;
    }
    socks_.push_back(std::move(fd));
  }
  return {};
}

// Gets the sockets from a live member.
Status PortGroup::fetch() {
  const ports::Group& gr = file_->group[group_];
  std::string why = "no live member answered";
  for (uint32_t i = 0; i < kPositions; ++i) {
    if (!live(i)) continue;
    UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!c.valid()) return sys_error("socket(AF_UNIX)");
    const timeval tv{2, 0};
    (void)::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_un a;
    const socklen_t len = server_name(a, at_, netns_, gr.members[i].slot);
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
      why = std::string("connect to the member in slot ") + std::to_string(gr.members[i].slot) + ": " +
            std::strerror(errno);
      continue;
    }
    if (!peer_is_us(c.get())) {
      why = "a member's socket is not ours";
      continue;
    }
    char byte;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kPositions)];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    if (::recvmsg(c.get(), &m, MSG_CMSG_CLOEXEC) != 1) {
      why = "no sockets from the member in slot " + std::to_string(gr.members[i].slot);
      continue;
    }
    std::vector<UniqueFd> got;
    for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
        const size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < n; ++k) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(h) + k * sizeof(int), sizeof fd);
          got.emplace_back(fd);
        }
      }
    bool ok = got.size() == kPositions && !(m.msg_flags & MSG_CTRUNC);
    for (size_t k = 0; ok && k < got.size(); ++k) ok = is_group_socket(got[k].get(), at_);
    if (!ok) {
      why = "the member in slot " + std::to_string(gr.members[i].slot) + " sent something else";
      continue;
    }
    socks_ = std::move(got);
    return {};
  }
  return err::from_errno(EAGAIN, "port group " + at_.to_string() + ": " + why);
}

Status PortGroup::claim() {
  ports::Group& gr = file_->group[group_];
  for (uint32_t i = 0; i < kPositions; ++i) {
    if (live(i)) continue;
    gr.members[i].owner = reg_->owner_word();
    gr.members[i].slot = reg_->slot();
    position_ = i;
    claimed_ = true;
    // What was queued for a process that held the position before us (it
    // may have had our registry slot, hence our QP numbers).
    char byte;
    while (::recv(socks_[i].get(), &byte, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0) {
    }
    return {};
  }
  return err::from_errno(
      ENOSPC, "port group " + at_.to_string() + ": all " + std::to_string(kPositions) + " positions are taken");
}

Status PortGroup::steer() {
  std::lock_guard lg(steer_mu_);
  UROCE_TRY(lock());
  Status s = steer_locked();
  unlock();
  return s;
}

void PortGroup::resteer() noexcept {
  // Never waits: a newcomer holding the table's lock may be waiting for
  // this very thread to hand it the sockets.
  std::unique_lock lg(steer_mu_, std::try_to_lock);
  if (!lg.owns_lock()) return;
  if (::flock(file_fd_.get(), LOCK_EX | LOCK_NB) != 0) return;  // next period
  if (Status s = steer_locked(); !s.ok())
    UROCE_LOG(warn, "port group %s: %s", at_.to_string().c_str(), s.to_string().c_str());
  unlock();
}

void PortGroup::steer_all() noexcept {
  std::lock_guard lg(groups_mu());
  for (PortGroup* g : groups())
    if (Status s = g->steer(); !s.ok())
      UROCE_LOG(warn, "port group %s: %s", g->at_.to_string().c_str(), s.to_string().c_str());
}

Status PortGroup::steer_locked() {
  SteeringTable t;
  for (uint32_t i = 0; i < kPositions; ++i)
    if (live(i)) {
      t.slots.push_back({file_->group[group_].members[i].slot, i});
      if (t.otherwise == kSteerFallback) t.otherwise = i;  // the lowest live position
    }
  if (!listeners_) {
    auto lt = ListenerTable::open(reg_);
    if (lt.ok()) listeners_ = std::move(*lt);
  }
  if (listeners_)
    for (const auto& [sid, slot] : listeners_->on(at_.addr)) t.listeners.push_back({sid, slot});
  UROCE_TRY(attach_steering(fd(), steering_program(t)));
  return {};
}

Status PortGroup::start_serving() {
  listen_fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return sys_error("socket(AF_UNIX)");
  sockaddr_un a;
  const socklen_t len = server_name(a, at_, netns_, reg_->slot());
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listen_fd_.get(), 16) != 0)
    return sys_error("serving the group's sockets");
  server_ = start_quiet_thread("uroce-port", [this] { serve_loop(); });
  return {};
}

void PortGroup::serve_loop() noexcept {
  std::vector<int> fds;
  for (const UniqueFd& s : socks_) fds.push_back(s.get());
  while (true) {
    pollfd p{listen_fd_.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, int(kResteerPeriod.count()));
    if (n == 0 || (n < 0 && errno == EINTR)) {
      if (n == 0) resteer();
      continue;
    }
    if (n < 0 || (p.revents & (POLLHUP | POLLERR | POLLNVAL))) return;  // shut down: we are leaving
    const int c = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      return;  // shut down: we are leaving
    }
    if (peer_is_us(c)) {
      char byte = 1;
      iovec iov{&byte, 1};
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kPositions)] = {};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* h = CMSG_FIRSTHDR(&m);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(h), fds.data(), sizeof(int) * fds.size());
      (void)::sendmsg(c, &m, MSG_NOSIGNAL);
    }
    ::close(c);
  }
}

PortGroup::~PortGroup() {
  {
    std::lock_guard lg(groups_mu());
    std::erase(groups(), this);
  }
  if (listen_fd_.valid()) ::shutdown(listen_fd_.get(), SHUT_RDWR);  // ends accept()
  join_quiet_thread(server_);
  // Closed before we wait for the table's lock: a newcomer that connected
  // just before the shutdown holds that lock while it waits for our
  // sockets, and would wait out its receive timeout (2 s) for an answer
  // nobody gives; the close ends its wait at once (and it tries another
  // member, or again).
  listen_fd_.reset();
  if (file_) {
    // Our position is free once we hold none of the sockets: a newcomer
    // that finds no live member founds the group anew on a free port.
    if (lock().ok()) {
      ports::Member& me = file_->group[group_].members[position_];
      if (claimed_ && me.owner == reg_->owner_word() && me.slot == reg_->slot()) {
        me.owner = 0;
        me.slot = 0;
        std::lock_guard lg(steer_mu_);
        if (!socks_.empty()) (void)steer_locked();  // without us
      }
      socks_.clear();
      unlock();
    }
    own_mappings::unmap(file_, sizeof(ports::File));
  }
}

void PortGroup::after_fork_in_child() noexcept {
  // The child is no member: it closes its copies (else the group's sockets
  // would outlive every member, and the next group on the port would not
  // have its sockets at the positions it numbers), here and never again:
  // the groups of the parent are never destroyed in the child (their NICs
  // are kept, unused: transport/nic.cpp).
  g_groups_mu = new (g_groups_mu_storage) std::mutex;
  for (PortGroup* g : groups()) {
    for (UniqueFd& s : g->socks_) ::close(s.release());
    ::close(g->listen_fd_.release());
    ::close(g->file_fd_.release());
  }
  groups().clear();
}

}  // namespace uroce::net
