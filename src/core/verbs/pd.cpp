#include "verbs/pd.hpp"

#include "verbs/context.hpp"
#include "verbs/mr.hpp"

namespace uroce::verbs {

Result<std::unique_ptr<Pd>> Pd::create(Context& ctx) {
  auto hold = ctx.resources().take(Resource::pd);
  if (!hold.ok()) return hold.status();
  std::unique_ptr<Pd> pd(new Pd(ctx, std::move(*hold)));
  ctx.users()++;
  return pd;
}

Pd::~Pd() { ctx_->users()--; }

uint8_t* Pd::local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need) const noexcept {
  const Mr* mr = MrTable::instance().lookup(lkey, KeyKind::local);
  if (!mr || mr->pd() != this) return nullptr;
  return mr->translate(addr, len, need);
}

uint8_t* Pd::remote(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need,
                    transport::AccessFault& fault) const noexcept {
  using transport::AccessFault;
  const Mr* mr = MrTable::instance().lookup(rkey, KeyKind::remote);
  fault = !mr                             ? AccessFault::key
          : mr->pd() != this              ? AccessFault::pd
          : (mr->access() & need) != need ? AccessFault::rights
          : mr->gone()                    ? AccessFault::gone
                                          : AccessFault::none;
  if (fault != AccessFault::none) return nullptr;
  uint8_t* p = mr->translate(va, len, need);
  if (!p) fault = AccessFault::bounds;
  return p;
}

}  // namespace uroce::verbs
