// uroce_private_cm_host (UROCE_PRIVATE_1): what librdmacm.so.1 needs from
// the core (cm_host.hpp).
#include "cm_host.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "cm/host/nic_port.hpp"
#include "compat.hpp"

namespace uroce::compat {
namespace {

class Host final : public CmHost {
 public:
  cm::GsiPort* gsi_port(ibv_context* c) noexcept override {
    if (!c) return nullptr;
    Context* ctx = to_ctx(c);
    transport::Nic& nic = ctx->core->nic();
    std::lock_guard g(mu_);
    auto& p = ports_[&nic];
    if (!p) {
      const verbs::Context& core = *ctx->core;
      // The ACK delay ibv_query_device reports (device.cpp).
      p = std::make_unique<cm::NicGsiPort>(nic, core.config().gids.at(0), core.port_attr().active_mtu_bytes,
                                           core.device_attr().node_guid, 8);
    }
    return p.get();
  }

  cm::Directory& directory() noexcept override {
    std::lock_guard g(mu_);
    if (!dir_) dir_ = cm::RegistryDirectory::create();
    return *dir_;
  }

 private:
  std::mutex mu_;
  std::map<transport::Nic*, std::unique_ptr<cm::NicGsiPort>> ports_;
  std::unique_ptr<cm::RegistryDirectory> dir_;
};

}  // namespace
}  // namespace uroce::compat

UROCE_C_API uroce::compat::CmHost* uroce_private_cm_host(uint32_t abi) {
  if (abi != uroce::compat::kCmHostAbi) return nullptr;
  static auto* host = new uroce::compat::Host();  // never destroyed: ports serve until exit
  return host;
}
