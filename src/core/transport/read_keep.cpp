// READ responses out of order: the requester's half of selective repeat
// for READs (docs/congestion.md).
//
// A READ response that arrives after a missing one is placed at once and
// remembered; the missing ones alone are asked for again, with a READ
// request for just their PSNs (IBA 9.7.5.1.x lets a requester ask again for
// part of a READ, and rdma_rxe and uroce answer it once the responses
// they are sending are out), and when they arrive the ones kept after them
// count as arrived too.  A response of a later READ says the responder
// executed everything before that READ: SENDs and WRITEs between are
// acknowledged by it.  Nothing on
// the wire changes, so this works with any responder.
#include <algorithm>

#include "transport/requester.hpp"

namespace uroce::transport {

// What can be in flight beyond una: a window's PSNs, then a READ request
// for up to a window's responses (requester.cpp).
static_assert(kKeepPsns >= 2 * kMaxWindowPkts, "every READ response in flight can be kept");

bool read_kept(const RequesterState& r, uint32_t psn) noexcept {
  return r.kept_count > 0 && uint32_t(psn_diff(psn, r.una_psn)) < kKeepPsns && r.read_kept[psn % kKeepPsns];
}

bool read_keepable(const Nic& nic, const RequesterState& r, uint32_t psn) noexcept {
  const int32_t ahead = psn_diff(psn, r.una_psn);
  return nic.config().cc.selective_repeat && ahead >= 0 && uint32_t(ahead) < kKeepPsns;
}

void read_keep(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t psn) noexcept {
  RequesterState& r = qp.req;
  if (r.kept_count == 0 || psn_before(r.kept_implied, w.first_psn)) r.kept_implied = w.first_psn;
  if (r.kept_count == 0 || psn_before(r.kept_hi, psn)) r.kept_hi = psn;
  r.read_kept[psn % kKeepPsns] = true;
  ++r.kept_count;
  ++nic.counters().req_read_kept;
}

bool read_absorb(RequesterState& r, SendWqe& w) noexcept {
  const uint32_t before = w.read_done;
  while (w.read_done < w.npkts) {
    const uint32_t psn = psn_add(w.first_psn, w.read_done);
    if (!read_kept(r, psn)) break;
    r.read_kept[psn % kKeepPsns] = false;
    --r.kept_count;
    ++w.read_done;
  }
  w.read_req = std::max(w.read_req, w.read_done);
  return w.read_done != before;
}

HoleAsk read_request_hole(Nic& nic, QpEngine& qp, const SendWqe& w, uint32_t missing, bool again) noexcept {
  RequesterState& r = qp.req;
  if (r.kept_count == 0) return HoleAsk::no;
  const uint32_t i = uint32_t(psn_diff(missing, w.first_psn));
  if (i >= w.read_req) return HoleAsk::no;  // not asked for yet: a pass going back asks
  // Asked for already (its answer may still be on the way, or overtaken by
  // a kept response; each ACK, NAK or reordered response would ask again):
  // only the watch asks again.
  if (!again && r.hole_asked && !psn_before(missing, r.asked_psn) && psn_before(missing, r.asked_end))
    return HoleAsk::already;
  // Within one earlier request: the responder finds it among its resources.
  const uint32_t seg = max_window_pkts(qp);
  const uint32_t end = std::min({w.npkts, (i / seg + 1) * seg, w.read_req});
  uint32_t n = 1;
  while (i + n < end && !read_kept(r, psn_add(missing, n))) ++n;
  r.hole_pkts = n;
  r.hole_asked = true;
  r.asked_psn = missing;
  r.asked_end = psn_add(missing, n);
  ++nic.counters().req_read_holes;
  r.read_watch = true;
  sr_watch(nic, qp, missing);  // the request, or the last response it draws, may be lost too
  nic.schedule(qp);
  return HoleAsk::asked;
}

}  // namespace uroce::transport
