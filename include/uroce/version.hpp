// Version of the uroce library.
#pragma once

namespace uroce {

// "0.1.0"
const char* version() noexcept;

}  // namespace uroce
