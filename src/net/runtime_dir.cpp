#include "net/runtime_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace uroce::net {
namespace {

bool ours_and_private(const std::string& dir) {
  struct stat st;
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && !(st.st_mode & 077);
}

}  // namespace

Status check_private_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const int e = errno;
    return err::from_errno(e, "mkdir " + dir + ": " + std::strerror(e));
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    const int e = errno;
    return err::from_errno(e, "stat " + dir + ": " + std::strerror(e));
  }
  const std::string hint =
      ": another user may have made it to see or take uroce's files; set UROCE_RUNTIME_DIR "
      "to a directory of yours";
  if (!S_ISDIR(st.st_mode)) return err::access(dir + " is not a directory" + hint);
  if (st.st_uid != ::geteuid())
    return err::access(dir + " is owned by uid " + std::to_string(st.st_uid) + ", not by us (uid " +
                       std::to_string(::geteuid()) + ")" + hint);
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return err::access(dir + " has mode " + mode + ", which lets others in" + hint);
  }
  return {};
}

Result<std::string> runtime_dir() {
  std::string dir;
  if (const char* env = std::getenv("UROCE_RUNTIME_DIR"); env && *env) {
    dir = env;
  } else if (const std::string run = "/run/user/" + std::to_string(::geteuid()); ours_and_private(run)) {
    dir = run + "/uroce";
  } else {
    dir = "/dev/shm/uroce-" + std::to_string(::geteuid());
  }
  UROCE_TRY(check_private_dir(dir));
  return dir;
}

}  // namespace uroce::net
