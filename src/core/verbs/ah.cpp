#include "verbs/ah.hpp"

#include "verbs/context.hpp"
#include "verbs/pd.hpp"

namespace uroce::verbs {

Result<std::unique_ptr<Ah>> Ah::create(Pd& pd, const AhAttr& attr) {
  const Context& ctx = pd.context();
  if (!attr.is_global) return err::inval("RoCE address handles need a GRH (is_global with the peer's GID)");
  if (attr.sgid_index >= ctx.config().gids.size())
    return err::inval("sgid_index " + std::to_string(attr.sgid_index) + " is not in the GID table");
  if (attr.dgid.is_v4() != ctx.config().gids[attr.sgid_index].is_v4())
    return err::inval("destination GID is not of the source GID's IP version");
  if (attr.port_num != 1) return err::inval("port_num must be 1");
  auto hold = pd.context().resources().take(Resource::ah);
  if (!hold.ok()) return hold.status();
  std::unique_ptr<Ah> ah(new Ah(pd, attr));
  ah->hold_ = std::move(*hold);
  pd.users()++;
  return ah;
}

Ah::~Ah() { pd_->users()--; }

}  // namespace uroce::verbs
