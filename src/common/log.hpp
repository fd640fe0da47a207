// Minimal leveled logging to stderr, off by default.
// UROCE_LOG=error|warn|info|debug|trace selects the level.
#pragma once

#include <atomic>
#include <cstdarg>

namespace uroce::log {

enum class Level : int { off = 0, error, warn, info, debug, trace };

// The level in force: UROCE_LOG's, read when the library is loaded (a log
// call made earlier, from another static initialiser, finds it off).
extern std::atomic<Level> g_level;

inline Level level() noexcept { return g_level.load(std::memory_order_relaxed); }
void set_level(Level l) noexcept;
void write(Level l, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

// One relaxed load and a compare, inlined: cheap enough for the packet path
// (the transport's state changes are traced).
inline bool enabled(Level l) noexcept { return static_cast<int>(l) <= static_cast<int>(level()); }

}  // namespace uroce::log

#define UROCE_LOG(lvl, ...)                                                                                          \
  do {                                                                                                               \
    if (::uroce::log::enabled(::uroce::log::Level::lvl)) ::uroce::log::write(::uroce::log::Level::lvl, __VA_ARGS__); \
  } while (0)
