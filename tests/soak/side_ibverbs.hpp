// The soak's device over libibverbs (side_ibverbs.cpp).
#pragma once

#include <memory>
#include <string>

#include "soak.hpp"

namespace uroce::soak {

// Opens the verbs device of that name ("uroce0": UROCE_ADDR names them when
// the drop-in libibverbs.so.1 is the one loaded).
Result<std::unique_ptr<Side>> open_ibverbs_side(const std::string& device);

}  // namespace uroce::soak
