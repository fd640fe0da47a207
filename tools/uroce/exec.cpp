// `uroce exec [--addr A] [--port P] -- PROGRAM ARGS...`: runs an unmodified
// RDMA program on uroce.  It puts the directory of the drop-in
// libibverbs.so.1 / librdmacm.so.1 first in LD_LIBRARY_PATH, sets UROCE_ADDR
// and UROCE_PORT when asked, shows the devices where programs look for them in
// the file system (/dev/infiniband, /sys/class/infiniband: device_view.hpp),
// and replaces itself with the program, whose exit status therefore is the
// command's.
//
// The drop-in libraries live outside the system's default library path (an
// ordinary program must not pick them up by accident), at a place known
// relative to this executable:
//
//   installed:   <prefix>/bin/uroce        <prefix>/lib/uroce/libibverbs.so.1
//   build tree:  <build>/tools/uroce/uroce  <build>/lib/libibverbs.so.1
//
// (CMake passes both relative paths in.)  Exit statuses of its own, as env(1)
// has them: 125 when uroce itself fails (bad option, libraries not found),
// 126 when the program cannot be run, 127 when it does not exist.
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "device_view.hpp"
#include "uroce/ip_addr.hpp"

#ifndef UROCE_EXEC_INSTALLED_LIBDIR
#error "UROCE_EXEC_INSTALLED_LIBDIR (the drop-in lib directory relative to the installed uroce) is not defined"
#endif
#ifndef UROCE_EXEC_BUILD_ROOT
#error "UROCE_EXEC_BUILD_ROOT (the build tree's root relative to the built uroce) is not defined"
#endif

namespace uroce::exec_tool {
namespace {

constexpr int kFailed = 125;
constexpr int kCannotRun = 126;
constexpr int kNotFound = 127;

struct Options {
  std::string addr;
  std::string port;  // empty: leave UROCE_PORT alone
  bool no_device_view = false;
  std::vector<std::string> command;
};

bool is_file(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// The path without "..", "." and symbolic links (it exists).
std::string canonical(const std::string& path) {
  char* p = ::realpath(path.c_str(), nullptr);
  if (!p) return path;
  std::string out(p);
  std::free(p);
  return out;
}

// The directory of this executable, from /proc/self/exe.
std::optional<std::string> self_dir() {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0 || size_t(n) >= buf.size()) return std::nullopt;
  buf.resize(size_t(n));
  const auto slash = buf.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  return buf.substr(0, slash == 0 ? 1 : slash);
}

// The directory that holds our libibverbs.so.1, or nullopt; `tried` gets the
// places looked at, for the error message.
std::optional<std::string> find_lib_dir(std::vector<std::string>& tried) {
  const auto dir = self_dir();
  if (!dir) {
    tried.push_back("(/proc/self/exe is unreadable)");
    return std::nullopt;
  }
  // Installed layout first.
  const std::string installed = *dir + "/" + UROCE_EXEC_INSTALLED_LIBDIR;
  tried.push_back(installed);
  if (is_file(installed + "/libibverbs.so.1")) return canonical(installed);
  // The build tree, only when this really is one (it has a CMakeCache.txt),
  // so that an installed uroce never wanders into some other lib directory.
  const std::string root = *dir + "/" + UROCE_EXEC_BUILD_ROOT;
  const std::string built = root + "/lib";
  tried.push_back(built);
  if (is_file(root + "/CMakeCache.txt") && is_file(built + "/libibverbs.so.1")) return canonical(built);
  return std::nullopt;
}

bool valid_addresses(const std::string& list) {
  size_t start = 0, count = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    if (!item.empty()) {
      if (!IpAddr::parse(item)) {
        std::fprintf(stderr, "uroce exec: --addr: '%s' is not an IPv4 or IPv6 address\n", item.c_str());
        return false;
      }
      ++count;
    }
    start = end + 1;
  }
  if (count == 0) std::fputs("uroce exec: --addr names no address\n", stderr);
  return count > 0;
}

bool valid_port(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long p = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || p < 1 || p > 65535) {
    std::fprintf(stderr, "uroce exec: --port: '%s' is not a UDP port (1..65535)\n", text.c_str());
    return false;
  }
  return true;
}

int run(const Options& o) {
  if (!o.addr.empty() && !valid_addresses(o.addr)) return kFailed;
  if (!o.port.empty() && !valid_port(o.port)) return kFailed;
  std::vector<std::string> tried;
  const auto lib_dir = find_lib_dir(tried);
  if (!lib_dir) {
    std::fputs("uroce exec: cannot find the drop-in libibverbs.so.1; looked in:\n", stderr);
    for (const auto& t : tried) std::fprintf(stderr, "  %s\n", t.c_str());
    std::fputs("(in a build tree, build the target uroce_compat first)\n", stderr);
    return kFailed;
  }

  std::string path = *lib_dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) path += std::string(":") + old;
  if (::setenv("LD_LIBRARY_PATH", path.c_str(), 1) != 0 ||
      (!o.addr.empty() && ::setenv("UROCE_ADDR", o.addr.c_str(), 1) != 0) ||
      (!o.port.empty() && ::setenv("UROCE_PORT", o.port.c_str(), 1) != 0)) {
    std::fprintf(stderr, "uroce exec: setenv: %s\n", std::strerror(errno));
    return kFailed;
  }

  if (!o.no_device_view) {
    const auto devs = cli::view_devices();
    if (!cli::view_present(devs)) {
      if (std::string why = cli::install_view(devs); !why.empty())
        std::fprintf(stderr,
                     "uroce exec: note: /dev/infiniband/%s and /sys/class/infiniband/%s are not shown to the "
                     "program (%s), so programs that look for devices there (UCX, rdma-core's tests) will not "
                     "find uroce's. As root this works; as a user it needs unprivileged user namespaces "
                     "(sysctl user.max_user_namespaces > 0; on Ubuntu also "
                     "kernel.apparmor_restrict_unprivileged_userns=0). --no-device-view silences this.\n",
                     devs[0].dev_name.c_str(), devs[0].name.c_str(), why.c_str());
    }
  }

  std::vector<char*> argv;
  argv.reserve(o.command.size() + 1);
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp(argv[0], argv.data());
  const int e = errno;
  if (e == ENOENT || e == ENOTDIR) {
    std::fprintf(stderr, "uroce exec: %s: command not found\n", argv[0]);
    return kNotFound;
  }
  std::fprintf(stderr, "uroce exec: %s: cannot run: %s\n", argv[0], std::strerror(e));
  return kCannotRun;
}

}  // namespace
}  // namespace uroce::exec_tool

namespace uroce::cli {

Command add_exec(CLI::App& root) {
  auto opts = std::make_shared<exec_tool::Options>();
  Command c;
  c.app = root.add_subcommand("exec",
                              "Run a program on uroce: its libibverbs.so.1 and librdmacm.so.1 are uroce's "
                              "(uroce exec [--addr A] [--port P] -- PROGRAM ARGS...)");
  c.app->add_option("--addr", opts->addr,
                    "Comma-separated IP addresses, one device each (sets UROCE_ADDR; default: as the "
                    "environment says, else 127.0.0.1)");
  c.app->add_option("--port", opts->port, "UDP port the devices receive on (sets UROCE_PORT; default 4791)");
  c.app->add_flag("--no-device-view", opts->no_device_view,
                  "Do not show the devices under /dev/infiniband and /sys/class/infiniband (by default the "
                  "program runs in a mount namespace of its own where they appear, for UCX and others)");
  c.app->add_option("command", opts->command, "The program and its arguments")->required();
  // Everything from the program's name on is the program's, options included.
  c.app->positionals_at_end();
  c.run = [opts] { return exec_tool::run(*opts); };
  return c;
}

}  // namespace uroce::cli
