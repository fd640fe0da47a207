// Where one user's host-local files live (the host registry, shared-memory
// rings, counter files), so that no other local user can plant, fill or
// take them first.
//
//  - $UROCE_RUNTIME_DIR if set and non-empty;
//  - else <run>/uroce, where <run> is /run/user/<euid> if that directory is
//    ours and private (systemd-logind makes it for a logged-in user, and no
//    one else can create anything in it);
//  - else /dev/shm/uroce-<euid>.
// The directory is created with mode 0700 if missing.  It is used only if it
// is a real directory (not a symlink), owned by the effective user, with no
// access for group or others; otherwise the answer is an error naming the
// owner and mode: another user may have made it first, and carrying on
// without it would let them see or steal our traffic.
#pragma once

#include <string>

#include "common/status.hpp"

namespace uroce::net {

Result<std::string> runtime_dir();

// Checks that `dir` is a directory owned by the effective user with no group
// or other access (creating it 0700 first if it does not exist).
Status check_private_dir(const std::string& dir);

}  // namespace uroce::net
