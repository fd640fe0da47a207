#include "common/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace uroce::log {
namespace {

Level from_env() noexcept {
  const char* v = std::getenv("UROCE_LOG");
  // Unset: only errors, the reasons uroce refuses to open a device (a port
  // or directory another user holds), which a program would not print.
  if (!v) return Level::error;
  static constexpr const char* names[] = {"off", "error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 6; ++i)
    if (std::strcmp(v, names[i]) == 0) return static_cast<Level>(i);
  return Level::warn;
}

}  // namespace

std::atomic<Level> g_level{from_env()};

void set_level(Level l) noexcept { g_level.store(l, std::memory_order_relaxed); }

void write(Level l, const char* fmt, ...) noexcept {
  static constexpr const char* tags[] = {"", "E", "W", "I", "D", "T"};
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "uroce[%s] %s\n", tags[static_cast<int>(l)], buf);
}

}  // namespace uroce::log
