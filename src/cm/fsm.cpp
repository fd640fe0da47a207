#include "cm/fsm.hpp"

#include <iterator>

namespace uroce::cm::fsm {

namespace {
#define UROCE_FSM_NAME(n) #n,
constexpr const char* kEvNames[] = {UROCE_CM_EVENTS(UROCE_FSM_NAME)};
constexpr const char* kActNames[] = {UROCE_CM_ACTS(UROCE_FSM_NAME)};
#undef UROCE_FSM_NAME
constexpr const char* kGuardNames[] = {"any", "qp", "no_qp", "retries_left", "retries_out", "ud", "not_ud"};

template <size_t N>
const char* name(const char* const (&names)[N], size_t i) noexcept {
  return i < N ? names[i] : "?";
}
}  // namespace

const char* to_string(Ev e) noexcept { return name(kEvNames, size_t(e)); }
const char* to_string(Act a) noexcept { return name(kActNames, size_t(a)); }
const char* to_string(Guard g) noexcept { return name(kGuardNames, size_t(g)); }

std::string dump() {
  std::string out;
  for (const Row& r : kTable) {
    out += cm::to_string(r.from);
    out += ' ';
    out += to_string(r.ev);
    if (r.guard != Guard::any) {
      out += " [";
      out += to_string(r.guard);
      out += ']';
    }
    out += " -> ";
    out += to_string(r.act);
    out += " -> ";
    out += cm::to_string(r.next);
    if (r.fail != r.next) {
      out += " | ";
      out += cm::to_string(r.fail);
    }
    if (r.flags & kKeep) out += " keep";
    if (r.flags & kIdUp) out += " id-up";
    out += '\n';
  }
  return out;
}

}  // namespace uroce::cm::fsm
