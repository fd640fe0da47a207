// Completion queues: ibv_create_cq, ibv_create_cq_ex (with ibv_start_poll,
// ibv_next_poll, ibv_end_poll and the ibv_wc_read_* accessors), ibv_poll_cq
// and ibv_req_notify_cq (reached through context->ops), ibv_resize_cq,
// ibv_destroy_cq.
//
// struct ibv_wc and the core's Wc have the same layout, so ibv_poll_cq
// hands the application's array to the core as it is: no copy, no lock
// beyond the core's own.
#include <cstring>

#include "compat.hpp"

namespace uroce::compat {
namespace {

static_assert(sizeof(ibv_wc) == sizeof(verbs::Wc));
static_assert(offsetof(ibv_wc, wr_id) == offsetof(verbs::Wc, wr_id));
static_assert(offsetof(ibv_wc, status) == offsetof(verbs::Wc, status));
static_assert(offsetof(ibv_wc, opcode) == offsetof(verbs::Wc, opcode));
static_assert(offsetof(ibv_wc, vendor_err) == offsetof(verbs::Wc, vendor_err));
static_assert(offsetof(ibv_wc, byte_len) == offsetof(verbs::Wc, byte_len));
static_assert(offsetof(ibv_wc, imm_data) == offsetof(verbs::Wc, imm_data));
static_assert(offsetof(ibv_wc, qp_num) == offsetof(verbs::Wc, qp_num));
static_assert(offsetof(ibv_wc, src_qp) == offsetof(verbs::Wc, src_qp));
static_assert(offsetof(ibv_wc, wc_flags) == offsetof(verbs::Wc, wc_flags));
static_assert(offsetof(ibv_wc, pkey_index) == offsetof(verbs::Wc, pkey_index));
static_assert(offsetof(ibv_wc, slid) == offsetof(verbs::Wc, slid));
static_assert(offsetof(ibv_wc, sl) == offsetof(verbs::Wc, sl));
static_assert(offsetof(ibv_wc, dlid_path_bits) == offsetof(verbs::Wc, dlid_path_bits));
static_assert(int(verbs::WcStatus::general_err) == IBV_WC_GENERAL_ERR);
static_assert(int(verbs::WcOpcode::recv_rdma_with_imm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(verbs::wc_flags::kGrh == IBV_WC_GRH && verbs::wc_flags::kWithImm == IBV_WC_WITH_IMM &&
              verbs::wc_flags::kWithInv == IBV_WC_WITH_INV);

// What ibv_wc_read_* can return: everything a struct ibv_wc holds, and the
// completion's timestamps on the device clock and the wall clock.
constexpr uint64_t kSupportedWcFlags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

ibv_cq_ex* create(const char* verb, ibv_context* context, uint32_t cqe, void* cq_context, ibv_comp_channel* channel,
                  uint32_t comp_vector, uint64_t wc_flags = 0) {
  Context* c = checked(verb, context);
  if (!c) return nullptr;
  if (channel) {
    Channel* ch = checked(verb, channel);
    if (!ch) return nullptr;
    if (ch->ctx != c) return fail_null<ibv_cq_ex>(verb, EINVAL, "the completion channel belongs to another context");
  }
  if (comp_vector >= uint32_t(context->num_comp_vectors))
    return fail_null<ibv_cq_ex>(verb, EINVAL, "comp_vector must be below num_comp_vectors (1)");
  auto* q = new Cq{};
  const verbs::CqStamps stamps{(wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) != 0,
                               (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) != 0};
  auto core = verbs::Cq::create(*c->core, cqe, channel ? to_channel(channel)->core : nullptr, q, stamps);
  if (!core.ok()) {
    delete q;
    return fail_null<ibv_cq_ex>(verb, core.status());
  }
  q->core = core->release();
  q->ctx = c;
  ibv_cq_ex& ex = q->ex;
  ex.context = context;
  ex.channel = channel;
  ex.cq_context = cq_context;
  ex.handle = c->handles.add(ObjKind::cq, q);
  ex.cqe = int(q->core->capacity());
  pthread_mutex_init(&ex.mutex, nullptr);
  pthread_cond_init(&ex.cond, nullptr);
  init_cq_ex_ops(ex);
  if (channel) channel->refcnt++;
  return &ex;
}

// ---- ibv_cq_ex: start_poll / next_poll / end_poll and the readers

inline const verbs::Wc& cur(ibv_cq_ex* cq) noexcept {
  Cq* q = to_cq(cq);
  return q->ex_buf[q->ex_pos];
}

// Makes ex_buf[ex_pos] the current entry, refilling from the core if all
// were consumed.  0, ENOENT (empty) or an errno value.
int load(Cq* q) noexcept {
  if (q->ex_pos >= q->ex_cnt) {
    auto n = q->core->poll({q->ex_buf, kExBatch}, {q->ex_ts, kExBatch});
    if (!n.ok()) return set_errno(n.status().code());
    q->ex_pos = 0;
    q->ex_cnt = uint32_t(*n);
    if (*n == 0) return ENOENT;
  }
  const verbs::Wc& wc = q->ex_buf[q->ex_pos];
  q->ex.wr_id = wc.wr_id;
  q->ex.status = static_cast<ibv_wc_status>(wc.status);
  return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return set_errno(EINVAL);
  return load(to_cq(cq));
}

int next_poll(ibv_cq_ex* cq) {
  Cq* q = to_cq(cq);
  ++q->ex_pos;  // the current entry is consumed
  return load(q);
}

void end_poll(ibv_cq_ex* cq) { ++to_cq(cq)->ex_pos; }

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return static_cast<ibv_wc_opcode>(cur(cq).opcode); }
uint32_t read_vendor_err(ibv_cq_ex* cq) { return cur(cq).vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* cq) { return cur(cq).byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) { return cur(cq).imm_data; }
uint32_t read_qp_num(ibv_cq_ex* cq) { return cur(cq).qp_num; }
uint32_t read_src_qp(ibv_cq_ex* cq) { return cur(cq).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return cur(cq).wc_flags; }
uint32_t read_slid(ibv_cq_ex* cq) { return cur(cq).slid; }
uint8_t read_sl(ibv_cq_ex* cq) { return cur(cq).sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return cur(cq).dlid_path_bits; }
// Not supported (creation refuses the flags); defined so a stray call reads 0.
uint64_t read_completion_ts(ibv_cq_ex* cq) {
  Cq* q = to_cq(cq);
  return q->ex_ts[q->ex_pos].device_ns;
}
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
  Cq* q = to_cq(cq);
  return q->ex_ts[q->ex_pos].wall_ns;
}
uint16_t read_cvlan(ibv_cq_ex*) { return 0; }
uint32_t read_flow_tag(ibv_cq_ex*) { return 0; }
void read_tm_info(ibv_cq_ex*, ibv_wc_tm_info* tm) { std::memset(tm, 0, sizeof *tm); }

}  // namespace

void init_cq_ex_ops(ibv_cq_ex& ex) noexcept {
  ex.start_poll = start_poll;
  ex.next_poll = next_poll;
  ex.end_poll = end_poll;
  ex.read_opcode = read_opcode;
  ex.read_vendor_err = read_vendor_err;
  ex.read_byte_len = read_byte_len;
  ex.read_imm_data = read_imm_data;
  ex.read_qp_num = read_qp_num;
  ex.read_src_qp = read_src_qp;
  ex.read_wc_flags = read_wc_flags;
  ex.read_slid = read_slid;
  ex.read_sl = read_sl;
  ex.read_dlid_path_bits = read_dlid_path_bits;
  ex.read_completion_ts = read_completion_ts;
  ex.read_cvlan = read_cvlan;
  ex.read_flow_tag = read_flow_tag;
  ex.read_tm_info = read_tm_info;
  ex.read_completion_wallclock_ns = read_completion_wallclock_ns;
}

// ---- the data path through context->ops

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  if (num_entries < 0) [[unlikely]]
    return -set_errno(EINVAL);
  Cq* q = to_cq(cq);
  int got = 0;
  if (q->ex_pos < q->ex_cnt) [[unlikely]] {  // left by ibv_end_poll on a cq_ex
    while (got < num_entries && q->ex_pos < q->ex_cnt) std::memcpy(&wc[got++], &q->ex_buf[q->ex_pos++], sizeof(ibv_wc));
    if (got == num_entries) return got;
  }
  auto n = q->core->poll({reinterpret_cast<verbs::Wc*>(wc + got), size_t(num_entries - got)});
  if (!n.ok()) [[unlikely]] {
    if (got) return got;
    return -set_errno(n.status().code());
  }
  return got + *n;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  Status s = to_cq(cq)->core->req_notify(solicited_only != 0);
  return s.ok() ? 0 : fail("ibv_req_notify_cq", s);
}

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr->wc_flags & ~kSupportedWcFlags)
    return fail_null<ibv_cq_ex>("ibv_create_cq_ex", EOPNOTSUPP, "CVLAN, flow tag and tag matching are not supported");
  if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
    return fail_null<ibv_cq_ex>("ibv_create_cq_ex", EINVAL, "unknown comp_mask bits");
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && attr->parent_domain)
    return fail_null<ibv_cq_ex>("ibv_create_cq_ex", EOPNOTSUPP, "parent domains are not supported");
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))
    return fail_null<ibv_cq_ex>("ibv_create_cq_ex", EOPNOTSUPP,
                                "IGNORE_OVERRUN is not supported (an overrun is always reported)");
  return create("ibv_create_cq_ex", context, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector,
                attr->wc_flags);
}

}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

UROCE_C_API ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                  int comp_vector) {
  if (cqe < 1) return fail_null<ibv_cq>("ibv_create_cq", EINVAL, "cqe must be at least 1");
  if (comp_vector < 0) return fail_null<ibv_cq>("ibv_create_cq", EINVAL, "comp_vector must not be negative");
  ibv_cq_ex* ex = create("ibv_create_cq", context, uint32_t(cqe), cq_context, channel, uint32_t(comp_vector));
  return ex ? ibv_cq_ex_to_cq(ex) : nullptr;
}

UROCE_C_API int ibv_resize_cq(ibv_cq* cq, int cqe) {
  Cq* q = checked("ibv_resize_cq", cq);
  if (!q) return errno;
  if (cqe < 1) return fail("ibv_resize_cq", EINVAL, "cqe must be at least 1");
  Status s = q->core->resize(uint32_t(cqe));
  if (!s.ok()) return fail("ibv_resize_cq", s);
  cq->cqe = int(q->core->capacity());
  return 0;
}

UROCE_C_API int ibv_destroy_cq(ibv_cq* cq) {
  Cq* q = checked("ibv_destroy_cq", cq);
  if (!q) return errno;
  if (q->core->users().load() > 0) return fail("ibv_destroy_cq", EBUSY, "QPs still use this CQ");
  q->ctx->handles.remove(ObjKind::cq, cq->handle);
  q->core->close();              // no event about it is queued from here on
  q->core->wait_events_acked();  // ibv_get_cq_event/ibv_ack_cq_events pairs
  wait_async_acked(cq->mutex, cq->cond, cq->async_events_completed, q->async_delivered);
  if (cq->channel) cq->channel->refcnt--;
  delete q->core;
  pthread_cond_destroy(&cq->cond);
  pthread_mutex_destroy(&cq->mutex);
  delete q;
  return 0;
}
