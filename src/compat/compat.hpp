// The drop-in libibverbs.so.1: the C ABI of <infiniband/verbs.h> as a thin
// skin over the core (src/core/verbs).
//
// Every verbs object handed to the application is one of the structs below:
// the C struct first (so the pointer the application holds is the struct's
// address), then the core object it wraps.  Data-path calls that verbs.h
// inlines (ibv_poll_cq, ibv_post_send, ...) reach us through
// context->ops; extended verbs (ibv_create_cq_ex, ibv_create_qp_ex,
// ibv_query_device_ex, ...) through struct verbs_context, which sits in
// front of the ibv_context as verbs_get_ctx() expects.
//
// Conventions of the C ABI, followed by every file of this directory:
//  - a verb returning int returns 0 or the errno value, and sets errno too
//    (the ones the manual pages define as returning -1 on error --
//    ibv_get_cq_event, ibv_get_async_event, ibv_query_gid, ibv_query_pkey,
//    ibv_get_pkey_index, ibv_query_gid_type -- return -1 with errno set;
//    ibv_poll_cq returns a negative errno value);
//  - a verb returning a pointer returns NULL and sets errno;
//  - a post verb sets *bad_wr to the first work request it did not post;
//  - what uroce does not implement fails with EOPNOTSUPP, never crashes.
// The reason for a failure is logged at level warn (UROCE_LOG=warn).
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/log.hpp"
#include "common/status.hpp"
#include "handles.hpp"
#include "verbs/ah.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/context.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/mw.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"
#include "verbs/srq.hpp"
#include "verbs/xrcd.hpp"

// Exported C entry points (the version script decides their version node).
#define UROCE_C_API extern "C" __attribute__((visibility("default")))

// Not in the installed headers (rdma-core's driver.h): the GID type as the
// kernel's sysfs names it, used by ibv_query_gid_type (IBVERBS_PRIVATE_34).
enum ibv_gid_type_sysfs {
  IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
  IBV_GID_TYPE_SYSFS_ROCE_V2,
};

namespace uroce::compat {

// ------------------------------------------------------------------ objects

// A device of the list (UROCE_ADDR).  Allocated once and never freed: an
// ibv_device must stay valid after ibv_free_device_list().
struct Device {
  ibv_device dev;
  verbs::DeviceConfig* cfg;
  int index;
};

struct Context {
  verbs_context vctx;  // vctx.context is the ibv_context the application holds
  Device* dev;
  verbs::Context* core;
  int cmd_fd = -1;      // ibv_context::cmd_fd (an eventfd: no kernel device)
  HandleTable handles;  // every object of this context, by handle (handles.hpp)
};

struct Pd {
  ibv_pd pd;
  verbs::Pd* core;
  Context* ctx;
};

struct Mr {
  ibv_mr mr;
  verbs::Mr* core;
};

struct Mw {
  ibv_mw mw;
  verbs::Mw* core;
};

struct Channel {
  ibv_comp_channel ch;
  verbs::CompChannel* core;
  Context* ctx;
};

// Completions taken from the core by ibv_start_poll/ibv_next_poll in one
// go; what the application has not consumed yet stays here for the next
// poll (of either API).
inline constexpr uint32_t kExBatch = 16;

struct Cq {
  ibv_cq_ex ex;  // allocated at ibv_cq_ex size for every CQ (ibv_cq is its prefix)
  verbs::Cq* core;
  Context* ctx;
  uint32_t async_delivered;  // async events handed out (ibv_get_async_event)
  uint32_t ex_pos, ex_cnt;   // cq_ex: current entry / entries in ex_buf
  verbs::Wc ex_buf[kExBatch];
  verbs::CompletionStamp ex_ts[kExBatch];  // their timestamps (a CQ created with them)
};

struct Srq {
  ibv_srq srq;
  verbs::Srq* core;
  uint32_t async_delivered;
};

struct Xrcd {
  ibv_xrcd xrcd;
  uint32_t handle;
  verbs::Xrcd* core;
  Context* ctx;
};

struct Ah {
  ibv_ah ah;
  verbs::Ah* core;
};

struct WrBuilder;  // the ibv_wr_* state of a QP (qp_ex.cpp)

struct Qp {
  ibv_qp_ex ex;  // every QP is an ibv_qp_ex: ibv_qp_to_qp_ex() always works
  verbs::Qp* core;
  uint32_t async_delivered;
  WrBuilder* wr;  // created with the QP
};

static_assert(std::is_standard_layout_v<Context> && std::is_standard_layout_v<Cq> && std::is_standard_layout_v<Qp> &&
              std::is_standard_layout_v<Srq>);
static_assert(offsetof(Cq, ex) == 0 && offsetof(Qp, ex) == 0 && offsetof(Pd, pd) == 0 && offsetof(Mr, mr) == 0 &&
              offsetof(Srq, srq) == 0 && offsetof(Ah, ah) == 0 && offsetof(Channel, ch) == 0 &&
              offsetof(Device, dev) == 0);

inline Context* to_ctx(ibv_context* c) noexcept {
  return reinterpret_cast<Context*>(reinterpret_cast<uint8_t*>(c) - offsetof(verbs_context, context));
}
inline Device* to_dev(ibv_device* d) noexcept { return reinterpret_cast<Device*>(d); }
inline Pd* to_pd(ibv_pd* p) noexcept { return reinterpret_cast<Pd*>(p); }
inline Mr* to_mr(ibv_mr* m) noexcept { return reinterpret_cast<Mr*>(m); }
inline Channel* to_channel(ibv_comp_channel* c) noexcept { return reinterpret_cast<Channel*>(c); }
inline Cq* to_cq(ibv_cq* c) noexcept { return reinterpret_cast<Cq*>(c); }
inline Cq* to_cq(ibv_cq_ex* c) noexcept { return reinterpret_cast<Cq*>(c); }
inline Srq* to_srq(ibv_srq* s) noexcept { return reinterpret_cast<Srq*>(s); }
inline Xrcd* to_xrcd(ibv_xrcd* x) noexcept { return reinterpret_cast<Xrcd*>(x); }
inline Ah* to_ah(ibv_ah* a) noexcept { return reinterpret_cast<Ah*>(a); }
inline Qp* to_qp(ibv_qp* q) noexcept { return reinterpret_cast<Qp*>(q); }
inline Qp* to_qp(ibv_qp_ex* q) noexcept { return reinterpret_cast<Qp*>(q); }

// ------------------------------------------------------------------ errors

inline int set_errno(int e) noexcept {
  errno = e;
  return e;
}

// Logs why `verb` failed, sets errno and returns the errno value.
int fail(const char* verb, const Status& s) noexcept;
int fail(const char* verb, int err, const char* why) noexcept;

template <class T>
T* fail_null(const char* verb, const Status& s) noexcept {
  fail(verb, s);
  return nullptr;
}
template <class T>
T* fail_null(const char* verb, int err, const char* why) noexcept {
  fail(verb, err, why);
  return nullptr;
}

// ------------------------------------------------------------------ handle checks

// The contexts this process has open (ibv_open_device / ibv_close_device).
void context_opened(const ibv_context* c);
void context_closed(const ibv_context* c) noexcept;

// The object a verb was given, looked up in its context's table as the
// kernel would (handles.hpp); nullptr with errno set and the reason logged
// if it is not there.  Nothing is dereferenced beyond the struct's
// `context` and `handle` (a channel's `fd`) fields until it is found.
Context* checked(const char* verb, ibv_context* c) noexcept;
Pd* checked(const char* verb, ibv_pd* p) noexcept;
Mr* checked(const char* verb, ibv_mr* m) noexcept;
Cq* checked(const char* verb, ibv_cq* q) noexcept;
Qp* checked(const char* verb, ibv_qp* q) noexcept;
Srq* checked(const char* verb, ibv_srq* s) noexcept;
Xrcd* checked(const char* verb, ibv_xrcd* x) noexcept;
Ah* checked(const char* verb, ibv_ah* a) noexcept;
Mw* checked(const char* verb, ibv_mw* m) noexcept;
Channel* checked(const char* verb, ibv_comp_channel* ch) noexcept;

// ------------------------------------------------------------------ shared helpers

// RoCE has no LIDs, but LID-only programs (qperf without -cm1) exchange
// port LIDs and build address vectors without a GRH.  A uroce port's LID is
// the low 16 bits of its first address, and an address vector without a GRH
// but with a DLID is routed to the address that shares the source GID's
// upper bits (/16 for IPv4, /112 for IPv6) and ends in the DLID.
uint16_t port_lid(const verbs::DeviceConfig& cfg) noexcept;

// ibv_ah_attr -> the core's AhAttr (with the LID routing above).  An
// attribute set without GRH or DLID is passed on as it is: the core refuses
// it with a message saying why.
void to_core_ah(const Context& ctx, const ibv_ah_attr& in, verbs::AhAttr& out) noexcept;
void from_core_ah(const verbs::AhAttr& in, ibv_ah_attr& out) noexcept;

// Async-event bookkeeping: destroying a CQ, QP or SRQ waits until every
// event handed out for it has been acknowledged.
void wait_async_acked(pthread_mutex_t& mu, pthread_cond_t& cond, const uint32_t& completed,
                      const uint32_t& delivered) noexcept;

// The context's ops and extended ops (one definition each, in their files).
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size);
int query_port_ex(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len);
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sges);
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
int dealloc_mw(ibv_mw* mw);
ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);
ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr);

// qp_ex.cpp: the ibv_wr_* function table of a new QP, and its state.
WrBuilder* new_wr_builder(const verbs::QpCap& cap);
void delete_wr_builder(WrBuilder* b) noexcept;
void init_qp_ex_ops(ibv_qp_ex& ex) noexcept;
// cq.cpp: the ibv_cq_ex function table.
void init_cq_ex_ops(ibv_cq_ex& ex) noexcept;

}  // namespace uroce::compat
