// What keeps another local user out: the runtime directory must be ours
// alone, /proc/net/udp tells who holds a port, and a port held by another
// user is an error at open, not a silent move to another port.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "net/proc_info.hpp"
#include "net/runtime_dir.hpp"
#include "net/udp_io.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {
namespace {

const IpAddr kLo4 = *IpAddr::parse("127.0.0.1");

class PrivateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/uroce-private-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
  }
  void TearDown() override {
    ::unsetenv("UROCE_RUNTIME_DIR");
    std::string cmd = "rm -rf '" + base_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string base_;
};

TEST_F(PrivateDir, MissingDirectoryIsCreatedPrivate) {
  const std::string d = base_ + "/rt";
  ASSERT_TRUE(check_private_dir(d).ok());
  struct stat st;
  ASSERT_EQ(::lstat(d.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_TRUE(check_private_dir(d).ok()) << "a second look at our own directory";
}

TEST_F(PrivateDir, OpenToOthersIsRefusedWithItsMode) {
  const std::string d = base_ + "/rt";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(d.c_str(), 0777), 0);
  Status s = check_private_dir(d);
  EXPECT_EQ(s.code(), EACCES);
  EXPECT_NE(s.message().find("mode 0777"), std::string::npos) << s.to_string();
  ASSERT_EQ(::chmod(d.c_str(), 0750), 0);
  EXPECT_EQ(check_private_dir(d).code(), EACCES);
}

TEST_F(PrivateDir, SymlinkOrFileIsRefused) {
  const std::string real = base_ + "/real", link = base_ + "/link", file = base_ + "/file";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  Status s = check_private_dir(link);
  EXPECT_EQ(s.code(), EACCES);
  EXPECT_NE(s.message().find("not a directory"), std::string::npos) << s.to_string();
  UniqueFd f(::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  ASSERT_TRUE(f.valid());
  EXPECT_EQ(check_private_dir(file).code(), EACCES);
}

TEST_F(PrivateDir, AnotherUsersDirectoryIsRefusedNamingTheOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root";
  const std::string d = base_ + "/rt";
  ASSERT_EQ(::mkdir(d.c_str(), 0700), 0);
  ASSERT_EQ(::chown(d.c_str(), 4242, 4242), 0);
  Status s = check_private_dir(d);
  EXPECT_EQ(s.code(), EACCES);
  EXPECT_NE(s.message().find("owned by uid 4242"), std::string::npos) << s.to_string();
}

TEST_F(PrivateDir, RuntimeDirFollowsTheEnvironment) {
  const std::string d = base_ + "/mine";
  ::setenv("UROCE_RUNTIME_DIR", d.c_str(), 1);
  auto r = runtime_dir();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, d);
  ::unsetenv("UROCE_RUNTIME_DIR");
  auto def = runtime_dir();
  ASSERT_TRUE(def.ok()) << def.status().to_string();
  const std::string uid = std::to_string(::geteuid());
  EXPECT_TRUE(*def == "/dev/shm/uroce-" + uid || *def == "/run/user/" + uid + "/uroce") << *def;
}

// A UDP socket bound to addr:port (0: any port); returns its port.
uint16_t bind_udp(UniqueFd& fd, const char* addr, uint16_t port = 0) {
  fd.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  ::inet_pton(AF_INET, addr, &sa.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return 0;
  socklen_t len = sizeof sa;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

// Whether a socket of this host holds `addr`:`port` (a bind there fails).
// Tests running beside this one may hold the same port number on another
// address (the kernel hands out an ephemeral port once per address), so
// "nobody holds it" is checked against the kernel's own answer.
bool port_taken(const char* addr, uint16_t port) {
  const IpAddr ip = *IpAddr::parse(addr);
  UniqueFd fd(::socket(ip.is_v4() ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len;
  if (ip.is_v4()) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    ::inet_pton(AF_INET, addr, &sa->sin_addr);
    len = sizeof *sa;
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(port);
    ::inet_pton(AF_INET6, addr, &sa->sin6_addr);
    len = sizeof *sa;
  }
  return ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno == EADDRINUSE;
}

TEST(PortHolders, ProcNetUdpNamesTheHolder) {
  UniqueFd a, w;
  const uint16_t p = bind_udp(a, "127.0.0.1");
  ASSERT_NE(p, 0);
  auto h = udp_port_holders(kLo4, p);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0], ::geteuid());
  EXPECT_EQ(udp_port_holders(*IpAddr::parse("127.0.0.2"), p).empty(), !port_taken("127.0.0.2", p)) << "another address";
  // A wildcard socket holds the port on every address.
  const uint16_t q = bind_udp(w, "0.0.0.0");
  ASSERT_NE(q, 0);
  EXPECT_EQ(udp_port_holders(*IpAddr::parse("127.0.0.9"), q).size(), 1u);
  // IPv4 sockets never hold an IPv6 address.
  EXPECT_EQ(udp_port_holders(*IpAddr::parse("::1"), q).empty(), !port_taken("::1", q));
}

// A child of another uid (root only) binds 127.0.0.1:<port> and holds it
// until told to go.
struct ForeignHolder {
  pid_t pid = -1;
  uint16_t port = 0;
  int go[2] = {-1, -1};
  explicit ForeignHolder(uid_t uid) {
    int ready[2];
    if (::pipe(ready) != 0 || ::pipe(go) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(1);
      UniqueFd s;
      const uint16_t p = bind_udp(s, "127.0.0.1");
      if (::write(ready[1], &p, sizeof p) != ssize_t(sizeof p)) ::_exit(2);
      char c;
      (void)!::read(go[0], &c, 1);
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(go[0]);
    go[0] = -1;
    if (::read(ready[0], &port, sizeof port) != ssize_t(sizeof port)) port = 0;
    ::close(ready[0]);
  }
  ~ForeignHolder() {
    if (pid > 0) {
      ::close(go[1]);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

TEST(PortHolders, AnotherUsersPortIsAnErrorNotAMove) {
  if (::geteuid() != 0) GTEST_SKIP() << "a socket of another uid needs root";
  ForeignHolder other(4243);
  ASSERT_NE(other.port, 0);
  UdpConfig cfg;
  cfg.local = kLo4;
  cfg.port = other.port;
  cfg.port_fallback = true;
  auto io = UdpIo::open(cfg);
  ASSERT_FALSE(io.ok()) << "moved to " << (*io)->local().to_string();
  EXPECT_EQ(io.status().code(), EADDRINUSE);
  EXPECT_NE(io.status().message().find("another user (uid 4243)"), std::string::npos) << io.status().to_string();
}

TEST(PortHolders, OurOwnPortStillMovesUsToAnother) {
  UniqueFd mine;
  const uint16_t p = bind_udp(mine, "127.0.0.1");
  ASSERT_NE(p, 0);
  UdpConfig cfg;
  cfg.local = kLo4;
  cfg.port = p;
  cfg.port_fallback = true;
  auto io = UdpIo::open(cfg);
  ASSERT_TRUE(io.ok()) << io.status().to_string();
  EXPECT_NE((*io)->local().port, p);
  cfg.port_fallback = false;
  EXPECT_EQ(UdpIo::open(cfg).status().code(), EADDRINUSE);
}

}  // namespace
}  // namespace uroce::net
