// The fixture of the CM state-machine tests (cm_*_test.cpp): two processes
// of a fake host (cm_harness.hpp), and a connect helper.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "cm_harness.hpp"

namespace uroce::cm::test {

using ET = EventType;
using ms = std::chrono::milliseconds;

inline std::vector<uint8_t> bytes(const char* s) { return std::vector<uint8_t>(s, s + std::strlen(s)); }

class Cm_ : public CmWorld {
 protected:
  FakeQp qa{0x4002}, qb{0x8002};

  // a's id `c` (QP qa) connects and its REQ is delivered: b's child for it,
  // considering the request (null if none came).
  Id* request_to_b(Id* c, ConnParam cp = {}) {
    a.cm.set_qp(c, &qa);
    EXPECT_TRUE(a.cm.connect(c, cp).ok());
    deliver();
    return request_of_b();
  }
  // Connects a (QP qa) to b (QP qb); returns {client id, server child}.
  std::pair<Id*, Id*> connect_pair(ConnParam cp = {}, ConnParam ap = {}) {
    listen_b();
    Id* c = resolved_a();
    Id* s = request_to_b(c, cp);
    EXPECT_NE(s, nullptr);
    if (!s) return {c, nullptr};
    b.cm.set_qp(s, &qb);
    EXPECT_TRUE(b.cm.accept(s, ap).ok());
    deliver();
    return {c, s};
  }
};

}  // namespace uroce::cm::test
