#include "transport/work_queue.hpp"

namespace uroce::transport {

Status post_recv_wrs(WorkQueue<RecvWqe>& q, std::span<const verbs::RecvWr> wrs, size_t* bad, const char* queue_name,
                     const char* sge_limit) {
  size_t i = 0;
  Status result;
  for (; i < wrs.size(); ++i) {
    const verbs::RecvWr& wr = wrs[i];
    if (wr.sg_list.size() > q.max_sge()) {
      result = err::inval("num_sge " + std::to_string(wr.sg_list.size()) + " above " + sge_limit + " " +
                          std::to_string(q.max_sge()));
      break;
    }
    if (q.full()) {
      result = err::nomem(std::string(queue_name) + " full (" + std::to_string(q.max_wr()) + " WRs)");
      break;
    }
    const uint32_t idx = q.tail();
    RecvWqe* wqe = q.push();
    if (!wqe) {
      result = err::nomem(std::string(queue_name) + ": out of memory for " + std::to_string(q.size() + 1) + " WRs");
      break;
    }
    RecvWqe& w = *wqe;
    w.wr_id = wr.wr_id;
    w.num_sge = uint16_t(wr.sg_list.size());
    w.length = 0;
    for (size_t k = 0; k < wr.sg_list.size(); ++k) {
      q.sges(idx)[k] = wr.sg_list[k];
      w.length += wr.sg_list[k].length;
    }
  }
  if (bad) *bad = i;
  return result;
}

}  // namespace uroce::transport
