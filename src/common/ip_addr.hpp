#pragma once
#include "uroce/ip_addr.hpp"  // IWYU pragma: export
