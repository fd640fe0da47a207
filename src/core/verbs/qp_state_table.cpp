#include "verbs/qp_state_table.hpp"

#include <array>

namespace uroce::verbs {
namespace {

namespace m = qp_attr_mask;

constexpr int kStates = 7;  // reset .. err
enum TypeIdx { kUd = 0, kUc = 1, kRc = 2, kXrcSend = 3, kXrcRecv = 4, kTypes = 5 };

struct Rule {
  bool valid = false;
  uint32_t req[kTypes] = {};
  uint32_t opt[kTypes] = {};
};

using Table = std::array<std::array<Rule, kStates>, kStates>;

constexpr Table build() {
  Table t{};
  constexpr int RESET = 0, INIT = 1, RTR = 2, RTS = 3, SQD = 4, SQE = 5, ERR = 6;
  // Any state may go to RESET or ERR with no attributes.
  for (int s = 0; s < kStates; ++s) {
    t[s][RESET].valid = true;
    t[s][ERR].valid = true;
  }
  auto set = [&](int from, int to, uint32_t ud_req, uint32_t uc_req, uint32_t rc_req, uint32_t ud_opt, uint32_t uc_opt,
                 uint32_t rc_opt) {
    Rule& r = t[from][to];
    r.valid = true;
    r.req[kUd] = ud_req;
    r.req[kUc] = uc_req;
    r.req[kRc] = rc_req;
    r.opt[kUd] = ud_opt;
    r.opt[kUc] = uc_opt;
    r.opt[kRc] = rc_opt;
  };
  const uint32_t ud_init = m::kPkeyIndex | m::kPort | m::kQkey;
  const uint32_t conn_init = m::kPkeyIndex | m::kPort | m::kAccessFlags;
  set(RESET, INIT, ud_init, conn_init, conn_init, 0, 0, 0);
  set(INIT, INIT, 0, 0, 0, ud_init, conn_init, conn_init);
  set(INIT, RTR, 0, m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn,
      m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic | m::kMinRnrTimer, m::kPkeyIndex | m::kQkey,
      m::kAltPath | m::kAccessFlags | m::kPkeyIndex, m::kAltPath | m::kAccessFlags | m::kPkeyIndex);
  set(RTR, RTS, m::kSqPsn, m::kSqPsn, m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic,
      m::kCurState | m::kQkey, m::kCurState | m::kAltPath | m::kAccessFlags | m::kPathMigState,
      m::kCurState | m::kAltPath | m::kAccessFlags | m::kMinRnrTimer | m::kPathMigState);
  const uint32_t rts_ud = m::kCurState | m::kQkey;
  const uint32_t rts_uc = m::kCurState | m::kAccessFlags | m::kAltPath | m::kPathMigState;
  const uint32_t rts_rc = rts_uc | m::kMinRnrTimer;
  set(RTS, RTS, 0, 0, 0, rts_ud, rts_uc, rts_rc);
  set(RTS, SQD, 0, 0, 0, m::kEnSqdAsyncNotify, m::kEnSqdAsyncNotify, m::kEnSqdAsyncNotify);
  set(SQD, RTS, 0, 0, 0, rts_ud, rts_uc, rts_rc);
  set(SQD, SQD, 0, 0, 0, m::kPkeyIndex | m::kQkey,
      m::kAv | m::kAltPath | m::kAccessFlags | m::kPkeyIndex | m::kPathMigState,
      m::kPort | m::kAv | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kMaxQpRdAtomic | m::kMaxDestRdAtomic |
          m::kAltPath | m::kAccessFlags | m::kPkeyIndex | m::kMinRnrTimer | m::kPathMigState);
  set(SQE, RTS, 0, 0, 0, m::kCurState | m::kQkey, m::kCurState | m::kAccessFlags, 0);
  // XRC follows RC but where a half has no use for an attribute: the send
  // half (XRC_SEND, the kernel's XRC_INI) has no responder, the receive half
  // (XRC_TGT) no requester, as the kernel's table says.
  for (auto& row : t)
    for (Rule& r : row)
      for (int x : {kXrcSend, kXrcRecv}) {
        r.req[x] = r.req[kRc];
        r.opt[x] = r.opt[kRc];
      }
  t[INIT][RTR].req[kXrcSend] = m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn;
  t[RTR][RTS].req[kXrcRecv] = m::kTimeout | m::kSqPsn;
  t[RTR][RTS].opt[kXrcSend] = m::kCurState | m::kAltPath | m::kAccessFlags | m::kPathMigState;
  t[RTS][RTS].opt[kXrcSend] = rts_uc;
  t[SQD][RTS].opt[kXrcSend] = rts_uc;
  return t;
}

constexpr Table kTable = build();

int type_index(QpType t) {
  switch (t) {
    case QpType::ud: return kUd;
    case QpType::uc: return kUc;
    case QpType::xrc_send: return kXrcSend;
    case QpType::xrc_recv: return kXrcRecv;
    default: return kRc;
  }
}

}  // namespace

std::string qp_attr_mask_names(uint32_t mask) {
  static constexpr const char* names[] = {"STATE",
                                          "CUR_STATE",
                                          "EN_SQD_ASYNC_NOTIFY",
                                          "ACCESS_FLAGS",
                                          "PKEY_INDEX",
                                          "PORT",
                                          "QKEY",
                                          "AV",
                                          "PATH_MTU",
                                          "TIMEOUT",
                                          "RETRY_CNT",
                                          "RNR_RETRY",
                                          "RQ_PSN",
                                          "MAX_QP_RD_ATOMIC",
                                          "ALT_PATH",
                                          "MIN_RNR_TIMER",
                                          "SQ_PSN",
                                          "MAX_DEST_RD_ATOMIC",
                                          "PATH_MIG_STATE",
                                          "CAP",
                                          "DEST_QPN",
                                          "21",
                                          "22",
                                          "23",
                                          "24",
                                          "RATE_LIMIT"};
  std::string out;
  for (int i = 0; i < 26; ++i)
    if (mask & (1u << i)) {
      if (!out.empty()) out += '|';
      out += names[i];
    }
  return out.empty() ? "none" : out;
}

Status check_qp_transition(QpType type, QpState cur, QpState next, uint32_t mask) {
  const int c = int(cur), n = int(next);
  if (c >= kStates || n >= kStates) return err::inval("QP state out of range");
  const Rule& r = kTable[c][n];
  if (!r.valid) return err::inval(std::string("no transition from ") + to_string(cur) + " to " + to_string(next));
  const int ti = type_index(type);
  const uint32_t missing = r.req[ti] & ~mask;
  if (missing)
    return err::inval(std::string(to_string(cur)) + "->" + to_string(next) + " for a " + to_string(type) +
                      " QP needs attributes " + qp_attr_mask_names(missing));
  const uint32_t allowed = r.req[ti] | r.opt[ti] | qp_attr_mask::kState | qp_attr_mask::kCurState;
  const uint32_t extra = mask & ~allowed;
  if (extra)
    return err::inval(std::string(to_string(cur)) + "->" + to_string(next) + " for a " + to_string(type) +
                      " QP does not take attributes " + qp_attr_mask_names(extra));
  return {};
}

}  // namespace uroce::verbs
