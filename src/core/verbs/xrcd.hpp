// XRC domain (ibv_open_xrcd): the scope in which an XRC_RECV QP may deliver
// into an XRC SRQ.  Opened on a file, as rdma-core does: every open of the
// same file (its device and inode) on one NIC is the same domain, as the
// kernel makes it for the processes of a host; with no file (fd -1), a
// domain of its own.  The processes of a host that open one file share the
// domain: an XRC_RECV QP of one delivers SENDs into the XRC SRQs of the
// others (transport/xrc_share.hpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/status.hpp"
#include "transport/ports.hpp"

namespace uroce::verbs {

class Context;
class Pd;

class Xrcd {
 public:
  // `oflags` as ibv_xrcd_init_attr's: O_CREAT makes the domain of a file
  // that has none, O_EXCL refuses a file that has one (EINVAL, as the
  // kernel); EBADF for a bad descriptor.
  static Result<std::unique_ptr<Xrcd>> open(Context& ctx, int fd, int oflags);
  ~Xrcd();
  Xrcd(const Xrcd&) = delete;
  Xrcd& operator=(const Xrcd&) = delete;

  uint32_t id() const noexcept { return id_; }  // equal for the same domain
  // The file it was opened on, which names it across processes (none: fd -1).
  transport::XrcFileKey file_key() const noexcept {
    return on_file_ ? transport::XrcFileKey{uint64_t(dev_), uint64_t(ino_)} : transport::XrcFileKey{};
  }
  Context& context() const noexcept { return *ctx_; }
  // What an XRC_RECV QP is accounted to (it has no PD of its own; the
  // memory its requests touch is the SRQ's PD's).
  Pd& pd() const noexcept { return *pd_; }
  // XRC SRQs and XRC_RECV QPs opened in it; close fails (EBUSY) while > 0.
  std::atomic<int>& users() noexcept { return users_; }

 private:
  Xrcd() = default;
  Context* ctx_ = nullptr;
  std::unique_ptr<Pd> pd_;
  uint32_t id_ = 0;
  bool on_file_ = false;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::atomic<int> users_{0};
};

}  // namespace uroce::verbs
