#include "uroce/status.hpp"

#include <cstring>

namespace uroce {

std::string Status::to_string() const {
  if (ok()) return "ok";
  const char* name = strerrorname_np(code_);
  std::string out = name ? name : ("errno " + std::to_string(code_));
  if (msg_ && !msg_->empty()) {
    out += ": ";
    out += *msg_;
  }
  return out;
}

}  // namespace uroce
