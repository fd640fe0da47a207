// `uroce exec`'s mount namespace with /dev/infiniband and
// /sys/class/infiniband entries for uroce's devices (device_view.hpp).
//
// How a directory D gets entries it does not have, without writing to it:
//   1. a tmpfs on a fresh directory T (under /tmp), with T/orig and T/view;
//   2. D bind-mounted (recursively) on T/orig;
//   3. for each entry of D, the same kind of entry in T/view with the
//      original bind-mounted onto it (a symbolic link is copied);
//   4. our entries added to T/view;
//   5. T/view bind-mounted (recursively) on D; T detached and removed.
// D is the deepest existing directory on the way: /dev/infiniband when the
// host has it, else /dev; /sys/class/infiniband, else /sys/class.
#include "device_view.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>

#include "uroce/device.hpp"

namespace uroce::cli {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_file(const std::string& path, const std::string& text, mode_t mode = 0444) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  return ok;
}

bool mkdirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string p = path.substr(0, i);
    if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// The interface that holds `a` (the loopback interface for any 127/8
// address), "" if none.
std::string interface_of(const IpAddr& a) {
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return "";
  std::string name, loopback;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (i->ifa_flags & IFF_LOOPBACK) loopback = i->ifa_name;
    const socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    auto ep = Endpoint::from_sockaddr(i->ifa_addr, len);
    if (ep && ep->addr == a) {
      name = i->ifa_name;
      break;
    }
  }
  ::freeifaddrs(ifs);
  if (name.empty() && a.is_v4() && (a.v4() >> 24) == 127) name = loopback;
  return name;
}

// One entry of the original directory, recreated in the view.
bool mirror_entry(const std::string& orig, const std::string& view, const char* name, std::string& why) {
  const std::string from = orig + "/" + name, to = view + "/" + name;
  struct stat st;
  if (::lstat(from.c_str(), &st) != 0) return true;  // gone meanwhile
  if (S_ISLNK(st.st_mode)) {
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(from.c_str(), target.data(), target.size());
    if (n < 0 || size_t(n) >= target.size()) return true;
    target.resize(size_t(n));
    if (::symlink(target.c_str(), to.c_str()) == 0) return true;
    why = errno_text("symlink " + to);
    return false;
  }
  const bool ok = S_ISDIR(st.st_mode) ? ::mkdir(to.c_str(), 0755) == 0 : write_file(to, "", 0644);
  if (!ok) {
    why = errno_text("create " + to);
    return false;
  }
  if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    why = errno_text("bind-mount " + from);
    return false;
  }
  return true;
}

// Steps 1-5 of the file comment for directory `dir`; `add` fills the view.
std::string overlay(const std::string& dir, const std::function<std::string(const std::string&)>& add) {
  char tmpl[] = "/tmp/uroce-view-XXXXXX";
  if (!::mkdtemp(tmpl)) return errno_text("mkdtemp");
  const std::string t = tmpl, orig = t + "/orig", view = t + "/view";
  std::string why;
  auto done = [&](std::string result) {
    ::umount2(t.c_str(), MNT_DETACH);
    ::rmdir(t.c_str());
    return result;
  };
  if (::mount("tmpfs", t.c_str(), "tmpfs", MS_NOSUID, "mode=0755") != 0) return done(errno_text("mount tmpfs"));
  if (::mkdir(orig.c_str(), 0755) != 0 || ::mkdir(view.c_str(), 0755) != 0) return done(errno_text("mkdir"));
  if (::mount(dir.c_str(), orig.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return done(errno_text("bind-mount " + dir));
  DIR* d = ::opendir(orig.c_str());
  if (!d) return done(errno_text("opendir " + dir));
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    if (!mirror_entry(orig, view, e->d_name, why)) break;
  }
  ::closedir(d);
  if (!why.empty()) return done(why);
  if (std::string w = add(view); !w.empty()) return done(w);
  if (::mount(view.c_str(), dir.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return done(errno_text("bind-mount the view on " + dir));
  return done("");
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// /dev/infiniband/<dev_name>: /dev/null bind-mounted on an empty file.
std::string add_dev_entries(const std::string& ib_dir, const std::vector<ViewDevice>& devs) {
  if (!mkdirs(ib_dir)) return errno_text("mkdir " + ib_dir);
  for (const auto& d : devs) {
    const std::string p = ib_dir + "/" + d.dev_name;
    if (exists(p)) continue;
    if (!write_file(p, "", 0666)) return errno_text("create " + p);
    if (::mount("/dev/null", p.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return errno_text("bind-mount /dev/null on " + p);
  }
  return "";
}

// /sys/class/infiniband/<dev>/: what programs read of a RoCE device.
std::string add_sys_entries(const std::string& ib_dir, const std::vector<ViewDevice>& devs) {
  for (const auto& d : devs) {
    const std::string base = ib_dir + "/" + d.name, port = base + "/ports/1";
    if (exists(base)) continue;
    for (const char* sub : {"/gids", "/gid_attrs/types", "/gid_attrs/ndevs", "/pkeys"})
      if (!mkdirs(port + sub)) return errno_text("mkdir " + port + sub);
    const std::string ifname = d.gids.empty() ? "" : interface_of(d.gids[0]);
    bool ok = mkdirs(base + "/device/net") && write_file(base + "/node_type", "1: CA\n") &&
              write_file(base + "/node_desc", "uroce " + d.name + "\n") &&
              write_file(base + "/device/numa_node", "-1\n") && write_file(port + "/state", "4: ACTIVE\n") &&
              write_file(port + "/phys_state", "5: LinkUp\n") && write_file(port + "/link_layer", "Ethernet\n") &&
              write_file(port + "/lid", "0x0\n") && write_file(port + "/pkeys/0", "0xffff\n");
    for (size_t i = 0; ok && i < d.gids.size(); ++i) {
      const std::string idx = std::to_string(i);
      ok = write_file(port + "/gids/" + idx, sysfs_gid(d.gids[i]) + "\n") &&
           write_file(port + "/gid_attrs/types/" + idx, "RoCE v2\n") &&
           write_file(port + "/gid_attrs/ndevs/" + idx, ifname + "\n");
    }
    // device/net/<ifname>: the netdev, as a PCI device's directory has it.
    if (ok && !ifname.empty())
      ok = ::symlink(("/sys/class/net/" + ifname).c_str(), (base + "/device/net/" + ifname).c_str()) == 0;
    if (!ok) return errno_text("write " + base);
  }
  return "";
}

std::string enter_namespace() {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (uid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) return errno_text("unshare(CLONE_NEWNS)");
  } else {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return errno_text("unshare(CLONE_NEWUSER | CLONE_NEWNS)");
    // The user and group map to themselves: the program runs as before.
    if (!write_file("/proc/self/setgroups", "deny", 0) ||
        !write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1", 0) ||
        !write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1", 0))
      return errno_text("write the user namespace's id maps");
  }
  // Nothing we mount leaks back to the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno_text("make / private");
  return "";
}

}  // namespace

std::string sysfs_gid(const IpAddr& a) {
  const auto& b = a.bytes();
  std::string out;
  char group[6];
  for (size_t i = 0; i < 16; i += 2) {
    std::snprintf(group, sizeof group, "%s%02x%02x", i ? ":" : "", b[i], b[i + 1]);
    out += group;
  }
  return out;
}

std::vector<ViewDevice> view_devices() {
  std::vector<ViewDevice> out;
  auto devs = uroce::devices();
  if (!devs.ok()) return out;
  for (const auto& d : *devs) out.push_back({d.name, d.name, d.gids});
  return out;
}

bool view_present(const std::vector<ViewDevice>& devs) {
  for (const auto& d : devs) {
    const std::string dev = "/dev/infiniband/" + d.dev_name;
    struct stat st;
    if (::stat(dev.c_str(), &st) != 0 || !S_ISCHR(st.st_mode) || ::access(dev.c_str(), R_OK | W_OK) != 0) return false;
    if (!exists("/sys/class/infiniband/" + d.name)) return false;
  }
  return true;
}

std::string install_view(const std::vector<ViewDevice>& devs) {
  if (devs.empty()) return "";
  if (std::string w = enter_namespace(); !w.empty()) return w;
  std::string w = exists("/dev/infiniband")
                      ? overlay("/dev/infiniband", [&](const std::string& v) { return add_dev_entries(v, devs); })
                      : overlay("/dev", [&](const std::string& v) { return add_dev_entries(v + "/infiniband", devs); });
  if (!w.empty()) return w;
  return exists("/sys/class/infiniband")
             ? overlay("/sys/class/infiniband", [&](const std::string& v) { return add_sys_entries(v, devs); })
             : overlay("/sys/class", [&](const std::string& v) {
                 if (::mkdir((v + "/infiniband").c_str(), 0755) != 0) return errno_text("mkdir infiniband");
                 return add_sys_entries(v + "/infiniband", devs);
               });
}

}  // namespace uroce::cli
