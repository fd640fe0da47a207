#include "verbs/types.hpp"

namespace uroce::verbs {

const char* to_string(QpState s) noexcept {
  static constexpr const char* names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"};
  return uint8_t(s) < 8 ? names[uint8_t(s)] : "?";
}

const char* to_string(QpType t) noexcept {
  switch (t) {
    case QpType::rc: return "RC";
    case QpType::uc: return "UC";
    case QpType::ud: return "UD";
    case QpType::xrc_send: return "XRC_SEND";
    case QpType::xrc_recv: return "XRC_RECV";
  }
  return "?";
}

const char* to_string(WcStatus s) noexcept {
  static constexpr const char* names[] = {"success",
                                          "local length error",
                                          "local QP operation error",
                                          "local EE context operation error",
                                          "local protection error",
                                          "Work Request Flushed Error",
                                          "memory management operation error",
                                          "bad response error",
                                          "local access error",
                                          "remote invalid request error",
                                          "remote access error",
                                          "remote operation error",
                                          "transport retry counter exceeded",
                                          "RNR retry counter exceeded",
                                          "local RDD violation error",
                                          "remote invalid RD request",
                                          "aborted error",
                                          "invalid EE context number",
                                          "invalid EE context state",
                                          "fatal error",
                                          "response timeout error",
                                          "general error"};
  const auto i = uint32_t(s);
  return i < sizeof names / sizeof *names ? names[i] : "unknown";
}

}  // namespace uroce::verbs
