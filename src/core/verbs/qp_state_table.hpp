// The IB QP state machine (IBA 10.3.1, table 91-ish): for every (current,
// next) state pair and QP type, which attributes modify_qp requires and which
// it allows.  One table, one check.
#pragma once

#include <cstdint>

#include "common/status.hpp"
#include "verbs/types.hpp"

namespace uroce::verbs {

// OK if moving a `type` QP from `cur` to `next` with attribute `mask` is
// legal: the transition exists, every required attribute is present and
// nothing beyond required|optional|kState|kCurState is.
Status check_qp_transition(QpType type, QpState cur, QpState next, uint32_t mask);

// Names of the attribute bits in `mask`, for error messages: "AV|PATH_MTU".
std::string qp_attr_mask_names(uint32_t mask);

}  // namespace uroce::verbs
