#pragma once
#include "uroce/status.hpp"  // IWYU pragma: export
