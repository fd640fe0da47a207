// ECN marking, CNPs and DCQCN pacing of connected QPs (congestion.hpp).
#include "transport/congestion.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "common/log.hpp"
#include "common/parse_number.hpp"
#include "transport/nic.hpp"
#include "transport/qp_engine.hpp"
#include "transport/requester.hpp"
#include "wire/opcode.hpp"

namespace uroce::transport {

const char* to_string(CcMode m) noexcept {
  switch (m) {
    case CcMode::none: return "none";
    case CcMode::dcqcn: return "dcqcn";
    case CcMode::swift: return "swift";
  }
  return "?";
}

bool congestion_from_env(CongestionConfig& cfg, const char*& bad) noexcept {
  if (const char* v = std::getenv("UROCE_CC"); v && *v) {
    const std::string_view s(v);
    if (s == "none") {
      cfg.mode = CcMode::none;
    } else if (s == "dcqcn") {
      cfg.mode = CcMode::dcqcn;
    } else if (s == "swift") {
      cfg.mode = CcMode::swift;
    } else {
      bad = "UROCE_CC";
      return false;
    }
  }
  // A switch: unset keeps `on` as it is; "0" or "1" sets it.
  auto flag = [&bad](const char* name, bool& on) {
    const char* v = std::getenv(name);
    if (!v || !*v) return true;
    const std::string_view s(v);
    if (s != "0" && s != "1") {
      bad = name;
      return false;
    }
    on = s == "1";
    return true;
  };
  if (!flag("UROCE_SR", cfg.selective_repeat) || !flag("UROCE_SACK", cfg.sack) ||
      !flag("UROCE_PATH_SHARE", cfg.share_paths))
    return false;
  if (const char* v = std::getenv("UROCE_RETRY_FLOOR_MS"); v && *v) {
    const auto ms = parse_unsigned<uint32_t>(v);
    if (!ms || *ms > 3'600'000) {
      bad = "UROCE_RETRY_FLOOR_MS";
      return false;
    }
    cfg.retry_floor = std::chrono::milliseconds(*ms);
  }
  return true;
}

uint8_t qp_tos(const Nic& nic, const QpEngine& qp) noexcept {
  const uint8_t dscp = uint8_t(qp.attr.ah_attr.traffic_class & ~kEcnMask);
  return nic.config().cc.mode == CcMode::none ? dscp : uint8_t(dscp | kEct0);
}

void congestion_marked(Nic& nic, QpEngine& qp) noexcept {
  ++nic.counters().ecn_marked;
  const CongestionConfig& cc = nic.config().cc;
  if (cc.mode == CcMode::none) return;
  const Clock::time_point now = nic.now();
  if (qp.cnp_sent_at != Clock::time_point{} && now - qp.cnp_sent_at < cc.dcqcn.cnp_interval) return;
  qp.cnp_sent_at = now;
  wire::Headers h;
  h.bth.opcode = uint8_t(wire::Opcode::cnp);
  h.bth.pkey = wire::kDefaultPkey;
  h.bth.becn = true;
  h.bth.dest_qp = qp.attr.dest_qp_num;
  if (nic.tx().full()) nic.flush_tx();
  (void)nic.tx().add(qp.peer, qp.icrc_ip, h, {}, qp_tos(nic, qp));  // headers and reserved bytes only
  ++nic.counters().cnp_sent;
}

void congestion_notified(Nic& nic, QpEngine& qp) noexcept {
  const CongestionConfig& cc = nic.config().cc;
  if (cc.mode == CcMode::none) return;
  ++nic.counters().cnp_handled;
  qp.dcqcn.on_cnp(cc.dcqcn, nic.now());
  nic.counters().cc_rate_mbps = qp.dcqcn.rate(cc.dcqcn);
  UROCE_LOG(debug, "qp 0x%x: CNP, rate %llu Mbit/s (alpha %.3f)", qp.qpn(), (unsigned long long)qp.dcqcn.rate(cc.dcqcn),
            qp.dcqcn.alpha());
}

bool swift_paced(const Nic& nic, const QpEngine& qp) noexcept {
  return delay_based(nic, qp) && qp.swift.paced(nic.config().cc.swift, max_window_pkts(qp)) && qp.req.srtt_ns > 0;
}

bool pace_next(const Nic& nic, const QpEngine& qp, Clock::time_point& at) noexcept {
  const bool d = qp.dcqcn.limited(), s = swift_paced(nic, qp);
  if (!d && !s) return false;
  at = d && s ? std::max(qp.dcqcn.next_send(), qp.swift.next_send()) : d ? qp.dcqcn.next_send() : qp.swift.next_send();
  return true;
}

bool pace_allows(Nic& nic, QpEngine& qp) noexcept {
  if (qp.dcqcn.limited()) qp.dcqcn.advance(nic.config().cc.dcqcn, nic.now());
  Clock::time_point at;
  if (!pace_next(nic, qp, at) || nic.now() >= at) return true;
  ++nic.counters().cc_paced;
  nic.arm_timer(qp, at);
  return false;
}

uint32_t paced_ack_every(const Nic& nic, const QpEngine& qp) noexcept {
  const double rate = double(qp.dcqcn.rate(nic.config().cc.dcqcn));  // Mbit/s = bits per us
  const double quarter_us = double(retransmit_interval(qp.attr.timeout).count()) / 4000.0;
  const double pkts = quarter_us * rate / (8.0 * double(qp.mtu));
  return pkts < 1 ? 1 : pkts > 1e6 ? 1000000u : uint32_t(pkts);
}

void pace_sent(Nic& nic, QpEngine& qp, uint32_t bytes) noexcept {
  if (delay_based(nic, qp))
    qp.swift.on_sent(nic.config().cc.swift, bytes, nic.now(), std::chrono::nanoseconds(qp.req.srtt_ns), qp.mtu,
                     max_window_pkts(qp));
  if (!qp.dcqcn.limited()) return;
  const DcqcnParams& p = nic.config().cc.dcqcn;
  qp.dcqcn.on_sent(p, bytes, nic.now());
  nic.counters().cc_rate_mbps = qp.dcqcn.rate(p);
}

}  // namespace uroce::transport
