#include "verbs/pd.hpp"

#include "verbs/context.hpp"

namespace uroce::verbs {

Result<std::unique_ptr<Pd>> Pd::create(Context& ctx) {
  auto hold = ctx.resources().take(Resource::pd);
  if (!hold.ok()) return hold.status();
  std::unique_ptr<Pd> pd(new Pd(ctx, std::move(*hold)));
  ctx.users()++;
  return pd;
}

Pd::~Pd() { ctx_->users()--; }

}  // namespace uroce::verbs
