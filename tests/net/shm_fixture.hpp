// The fixture of the shared-memory tests (shm_ring_test.cpp, shm_io_test.cpp,
// shm_icrc_test.cpp): a private directory under /dev/shm per test, removed
// after it, and packets that say who made them and check their own bytes.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net/fault_io.hpp"
#include "net/shm_io.hpp"
#include "support/roce_packet.hpp"
#include "wire/icrc.hpp"
#include "wire/opcode.hpp"

namespace uroce::net::shm_test {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

inline const IpAddr kLo = *IpAddr::parse("127.0.0.1");

// Packet k of producer `who`: [who][k][pattern], `len` bytes in all (>= 8).
inline Bytes make_pkt(uint32_t who, uint32_t k, size_t len) {
  Bytes b(len);
  std::memcpy(b.data(), &who, 4);
  std::memcpy(b.data() + 4, &k, 4);
  for (size_t i = 8; i < len; ++i) b[i] = uint8_t(who * 131 + k * 7 + i);
  return b;
}
inline size_t len_for(uint32_t k) { return 8 + (k * 37) % 600; }

struct Parsed {
  uint32_t who, k;
  bool intact;
};
inline Parsed parse(std::span<const uint8_t> d) {
  Parsed p{~0u, ~0u, false};
  if (d.size() < 8) return p;
  std::memcpy(&p.who, d.data(), 4);
  std::memcpy(&p.k, d.data() + 4, 4);
  const Bytes want = make_pkt(p.who, p.k, d.size());
  p.intact = d.size() == len_for(p.k) && std::memcmp(want.data(), d.data(), d.size()) == 0;
  return p;
}

class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/dev/shm/uroce-shm-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') ::unlink((dir_ + "/" + e->d_name).c_str());
      ::closedir(d);
    }
    ::rmdir(dir_.c_str());
  }
  size_t files() const {
    size_t n = 0;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
      ::closedir(d);
    }
    return n;
  }
  std::string ring_path() const { return dir_ + "/ring"; }

  std::unique_ptr<ShmRing> make_ring(uint32_t slots, std::chrono::milliseconds stall_dead = 10ms,
                                     std::chrono::milliseconds stall_max = 1000ms) {
    ShmRing::CreateOptions o;
    o.slots = slots;
    o.stall_dead = stall_dead;
    o.stall_max = stall_max;
    auto r = ShmRing::create(ring_path(), o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::unique_ptr<ShmRing> attach() {
    auto r = ShmRing::attach(ring_path());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : nullptr;
  }

  // A plain UDP peer on loopback (no ring): another host, as far as we know.
  static std::unique_ptr<UdpIo> open_plain() {
    UdpConfig u;
    u.local = kLo;
    u.port = 0;
    auto r = UdpIo::open(u);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : nullptr;
  }

  std::unique_ptr<ShmIo> open_io(uint16_t port = 0, ShmConfig cfg = {}, const IpAddr& addr = kLo) {
    UdpConfig u;
    u.local = addr;
    u.port = port;
    u.port_fallback = false;
    auto udp = UdpIo::open(u);
    EXPECT_TRUE(udp.ok()) << udp.status().to_string();
    if (!udp.ok()) return nullptr;
    cfg.dir = dir_;
    auto io = ShmIo::wrap(std::move(*udp), cfg);
    EXPECT_TRUE(io.ok()) << io.status().to_string();
    return io.ok() ? std::move(*io) : nullptr;
  }

  std::string dir_;
};

// A tmpfs of `size` ("1m") on a fresh directory, for rings that find no
// room; unmounted and removed at the end.  path() is empty where mounting is
// not allowed (not root): skip then.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(const char* size) {
    char dir[] = "/tmp/uroce-small-XXXXXX";
    if (!::mkdtemp(dir)) return;
    const std::string opts = std::string("size=") + size + ",mode=0700";
    if (::mount("tmpfs", dir, "tmpfs", 0, opts.c_str()) != 0) {
      why_ = std::string("cannot mount a tmpfs here: ") + std::strerror(errno);
      ::rmdir(dir);
      return;
    }
    path_ = dir;
  }
  ~SmallTmpfs() {
    if (path_.empty()) return;
    EXPECT_EQ(::umount(path_.c_str()), 0);
    EXPECT_EQ(::rmdir(path_.c_str()), 0);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  const std::string& path() const { return path_; }
  const std::string& why() const { return why_; }

 private:
  std::string path_, why_;
};

inline ShmMeta meta(uint16_t hint = 0) { return ShmMeta{Endpoint{kLo, 1234}, kLo, 0x02, 64, hint}; }

inline ShmRing::Put put(ShmRing& r, const Bytes& b, uint16_t hint = 0) {
  // Split over head / body / tail as the NIC does.
  const size_t h = std::min<size_t>(b.size(), 12), t = b.size() > 16 ? 4 : 0;
  std::span<const uint8_t> s(b);
  return r.put(meta(hint), s.subspan(0, h), s.subspan(h, b.size() - h - t), s.subspan(b.size() - t));
}

}  // namespace uroce::net::shm_test
