// The private interface between uroce's libibverbs.so.1 and librdmacm.so.1.
//
// The connection manager (librdmacm.so.1, src/compat/rdmacm) opens devices
// through the public verbs API like any application, but needs two things
// only the library holding the core can give: QP1 of a device (to send and
// receive CM MADs) and the host registry (to find a same-host peer's
// process).  libibverbs.so.1 exports one function for that, at the private
// version node UROCE_PRIVATE_1; both libraries come from one build, so the
// C++ interface below is their contract (bump kCmHostAbi on any change).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "cm/gsi.hpp"

namespace uroce::compat {

inline constexpr uint32_t kCmHostAbi = 1;

class CmHost {
 public:
  // QP1 of the device of `ctx` (an ibv_context of our libibverbs, which
  // must stay open): one port per device, owned by the host, never freed.
  virtual cm::GsiPort* gsi_port(ibv_context* ctx) noexcept = 0;
  // The host registry of this process.
  virtual cm::Directory& directory() noexcept = 0;

 protected:
  ~CmHost() = default;
};

}  // namespace uroce::compat

// The host of this process, or null if `abi` is not kCmHostAbi.
extern "C" uroce::compat::CmHost* uroce_private_cm_host(uint32_t abi);
