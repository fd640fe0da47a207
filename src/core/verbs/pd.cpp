#include "verbs/pd.hpp"

#include "verbs/context.hpp"
#include "verbs/mr.hpp"
#include "verbs/mw.hpp"

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

uint8_t* Pd::remote(uint32_t rkey, uint64_t va, uint64_t len, uint32_t need, uint32_t qpn,
                    transport::AccessFault& fault) const noexcept {
  using transport::AccessFault;
  if (is_window_key(rkey)) {
    const Mw* mw = MwTable::instance().lookup(rkey);
    if (!mw) {
      fault = AccessFault::key;
      return nullptr;
    }
    return mw->translate(rkey, va, len, need, *this, qpn, fault);
  }
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

WcStatus Pd::bind_window(const transport::WindowBind& b, uint32_t qpn) const noexcept {
  Mw* mw = MwTable::instance().lookup(b.mw_key);
  if (!mw || &mw->pd() != this) return WcStatus::mw_bind_err;
  return mw->bind(b, *this, qpn);
}

bool Pd::invalidate(uint32_t rkey) const noexcept {
  Mw* mw = MwTable::instance().lookup(rkey);
  return mw && &mw->pd() == this && mw->invalidate(rkey);
}

}  // namespace uroce::verbs
