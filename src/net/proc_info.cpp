#include "net/proc_info.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "net/unique_fd.hpp"

namespace uroce::net {

std::optional<ProcStat> proc_stat(pid_t pid) noexcept {
  char path[48];
  if (pid == 0)
    std::snprintf(path, sizeof path, "/proc/self/stat");
  else
    std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[1024];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // The command name (field 2) is in parentheses and may hold anything.
  char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return std::nullopt;
  p += 2;
  ProcStat st{*p, 0};
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (!p) return std::nullopt;
    ++p;
  }
  st.start = std::strtoull(p, nullptr, 10);
  return st;
}

uint64_t ns_inode(const char* kind) noexcept {
  char path[64];
  struct stat st;
  std::snprintf(path, sizeof path, "/proc/thread-self/ns/%s", kind);
  if (::stat(path, &st) == 0) return st.st_ino;
  std::snprintf(path, sizeof path, "/proc/self/ns/%s", kind);
  return ::stat(path, &st) == 0 ? st.st_ino : 0;
}

}  // namespace uroce::net
