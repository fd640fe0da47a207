// The drop-in librdmacm.so.1: the C ABI of <rdma/rdma_cma.h> over the
// connection manager core (src/cm), which runs in this library with its own
// thread (cm::Service).  Devices are opened through the public verbs API of
// uroce's libibverbs.so.1 (one context per device, kept open), and QP1 and
// the host registry are borrowed from it through its private
// uroce_private_cm_host() (src/compat/cm_host.hpp).
//
// Objects handed to the application:
//  - rdma_event_channel: a Channel (fd = an eventfd readable exactly while
//    events wait in its queue; the application may poll it and set
//    O_NONBLOCK);
//  - rdma_cm_id: a CmId, the C struct first.  A CONNECT_REQUEST's new id
//    inherits the listener's context, channel and port space, and its
//    device's verbs context;
//  - rdma_cm_event: an EventBox, owned by the library until
//    rdma_ack_cm_event; rdma_destroy_id waits until every event handed out
//    for the id is acknowledged (a CONNECT_REQUEST counts for its listener).
//  - An id created without a channel is synchronous: it gets a channel of
//    its own and each operation that produces an event waits for it.
//
// Conventions: every rdma_* returning int returns 0, or -1 with errno set;
// pointer-returning ones return NULL with errno set.  The reason for a
// failure is logged at level warn (UROCE_LOG=warn).
//
// Lock order: the Cm's lock -> a Channel's -> a CmId's (the event sink runs
// under the Cm's lock; rdma_get_cm_event takes a Channel's, then the
// owner's CmId's to count the event out).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cm/cm.hpp"
#include "cm/service.hpp"
#include "common/log.hpp"
#include "common/status.hpp"

#define UROCE_C_API extern "C" __attribute__((visibility("default")))

namespace uroce::rdmacm {

struct CmId;

// One event, as handed to the application.
struct EventBox {
  rdma_cm_event ev;       // first: the pointer the application holds
  CmId* owner = nullptr;  // whose acknowledgement count it is on
  uint8_t data[256];      // the private data ev.param points at
};

struct Channel {
  rdma_event_channel ch;  // first; ch.fd is the eventfd
  std::mutex mu;
  std::deque<EventBox*> queue;
  bool internal = false;  // a synchronous id's own
  // The thread that destroyed it: a call from another thread raced the
  // teardown (see next_event in channel.cpp), unless the fd was
  // non-blocking then.
  std::thread::id destroyed_by{};
  bool was_nonblocking = false;
};

// A device: the verbs context the CM opened on it, and its QP1.
struct Device {
  ibv_context* ctx = nullptr;
  cm::GsiPort* port = nullptr;
  uint8_t max_resp_res = 0;    // max_qp_rd_atom
  uint8_t max_init_depth = 0;  // max_qp_init_rd_atom
  std::mutex mu;
  ibv_pd* pd = nullptr;      // the default PD: every id's id->pd on this device
  ibv_xrcd* xrcd = nullptr;  // the XRC domain of its XRC_RECV QPs and XRC SRQs
};

// The QP of an id, as the Cm moves it (ibv_modify_qp).
class QpCtl final : public cm::QpControl {
 public:
  ibv_qp* qp = nullptr;
  uint32_t qpn() const noexcept override { return qp->qp_num; }
  Status modify(const cm::QpAttrs& a) noexcept override;
};

struct CmId {
  rdma_cm_id id;  // first
  cm::Id* core = nullptr;
  Channel* chan = nullptr;
  bool sync = false;
  Device* dev = nullptr;
  QpCtl qpctl;
  // CQs and channels rdma_create_qp made (destroyed with the QP)
  bool own_cqs = false;
  // rdma_create_ep on a passive endpoint: each request's QP
  std::optional<ibv_qp_init_attr> ep_qp_attr;
  ibv_pd* ep_pd = nullptr;
  // what the peer's REQ asked for (CONNECT_REQUEST's conn parameters)
  uint8_t req_responder_resources = 0;
  uint8_t req_initiator_depth = 0;
  ibv_sa_path_rec path{};
  // multicast groups joined (multicast.cpp)
  struct Join {
    IpAddr group;
    bool attached;  // its QP is attached to the group
  };
  std::vector<Join> joins;
  // events handed out and not acknowledged
  std::mutex mu;
  std::condition_variable cv;
  uint32_t outstanding = 0;
};

inline CmId* to_cm(rdma_cm_id* id) noexcept { return reinterpret_cast<CmId*>(id); }
inline Channel* to_channel(rdma_event_channel* c) noexcept { return reinterpret_cast<Channel*>(c); }
inline EventBox* to_box(rdma_cm_event* e) noexcept { return reinterpret_cast<EventBox*>(e); }

// The library: the Cm, its thread, the devices.  Made on first use, never
// destroyed (its thread is stopped at exit).
struct Library;
Library* lib() noexcept;  // null (errno set) if the CM could not start
cm::Cm& cm_of(Library& l) noexcept;
const std::vector<Device*>& devices(Library& l) noexcept;
Device* device_of(Library& l, const cm::GsiPort* port) noexcept;
ibv_pd* default_pd(Device& d) noexcept;
ibv_xrcd* default_xrcd(Device& d) noexcept;

// Channels (channel.cpp).
Channel* new_channel(bool internal) noexcept;
void push_event(Channel& ch, EventBox* box) noexcept;
// Removes the queued events about `id` (as id or as listen_id); returns them.
std::vector<EventBox*> take_events(Channel& ch, const CmId* id) noexcept;
void retire_channel(Channel* ch) noexcept;  // closes it; the struct is kept (a thread may be in it)
// A synchronous id's wait for the event its operation produces (and the
// acknowledgement of the previous one): 0, or -1 with errno.
int wait_event(CmId& id) noexcept;

// rdma_create_id with an explicit QP type (rdma_create_ep passes the
// addrinfo's).
int create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps, cm::QpType qp_type);

// The id's addressing fields (verbs, route) from the core's view.
void refresh(CmId& id, const cm::IdView& v, Library& l) noexcept;

// Errors: log, set errno, return -1 (or null).
int fail(const char* fn, const Status& s) noexcept;
int fail(const char* fn, int err, const char* why) noexcept;

std::optional<Endpoint> endpoint_of(const sockaddr* sa) noexcept;

}  // namespace uroce::rdmacm
