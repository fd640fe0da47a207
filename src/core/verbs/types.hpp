#pragma once
#include "uroce/types.hpp"  // IWYU pragma: export
