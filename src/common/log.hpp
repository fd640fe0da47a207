// Minimal leveled logging to stderr, off by default.
// UROCE_LOG=error|warn|info|debug|trace selects the level.
#pragma once

#include <cstdarg>

namespace uroce::log {

enum class Level : int { off = 0, error, warn, info, debug, trace };

Level level() noexcept;
void set_level(Level l) noexcept;
void write(Level l, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

inline bool enabled(Level l) noexcept { return static_cast<int>(l) <= static_cast<int>(level()); }

}  // namespace uroce::log

#define UROCE_LOG(lvl, ...)                                                                                          \
  do {                                                                                                               \
    if (::uroce::log::enabled(::uroce::log::Level::lvl)) ::uroce::log::write(::uroce::log::Level::lvl, __VA_ARGS__); \
  } while (0)
