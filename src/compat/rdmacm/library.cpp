// The library state: the Cm, its thread, the devices, and the event sink
// that turns the Cm's events into rdma_cm_events on the ids' channels.
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "../cm_host.hpp"
#include "rdmacm.hpp"

namespace uroce::rdmacm {

namespace {

class Sink final : public cm::EventSink {
 public:
  Library* lib = nullptr;
  void deliver(cm::Event&& e) noexcept override;
};

}  // namespace

struct Library {
  compat::CmHost* host = nullptr;
  std::vector<Device*> devices;
  Sink sink;
  std::unique_ptr<cm::Cm> cm;
  std::unique_ptr<cm::Service> service;
  pid_t pid = ::getpid();  // the process whose CM thread `service` runs
};

namespace {

Library* init() {
  compat::CmHost* host = uroce_private_cm_host(compat::kCmHostAbi);
  if (!host) {
    std::fprintf(stderr, "uroce librdmacm: the libibverbs.so.1 loaded is not uroce's of this build\n");
    errno = ENOSYS;
    return nullptr;
  }
  auto* l = new Library;
  l->host = host;
  l->sink.lib = l;
  l->cm = std::make_unique<cm::Cm>(host->directory(), l->sink);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (!ctx) {
      UROCE_LOG(warn, "librdmacm: cannot open %s: %s", ibv_get_device_name(list[i]), std::strerror(errno));
      continue;
    }
    cm::GsiPort* port = host->gsi_port(ctx);
    if (!port) {
      ibv_close_device(ctx);
      continue;
    }
    auto* d = new Device;
    d->ctx = ctx;
    d->port = port;
    // Every id on the device gets this PD as id->pd, as with rdma-core
    // (UCX's rdma_cm transport creates its QPs in it).
    d->pd = ibv_alloc_pd(ctx);
    ibv_device_attr a{};
    if (ibv_query_device(ctx, &a) == 0) {
      d->max_resp_res = uint8_t(std::min(a.max_qp_rd_atom, 255));
      d->max_init_depth = uint8_t(std::min(a.max_qp_init_rd_atom, 255));
    }
    l->devices.push_back(d);
    l->cm->add_port(*port);
  }
  if (list) ibv_free_device_list(list);
  l->service = std::make_unique<cm::Service>(*l->cm);
  for (Device* d : l->devices) d->port->set_receiver(l->service.get());
  // Stop the thread before the process's static objects go away.  Not in
  // a forked child that exit()s: the thread is the parent's, and so are
  // the locks it may have held at the fork (the CM's, a port's).
  std::atexit([] {
    if (Library* x = lib(); x && x->pid == ::getpid()) {
      for (Device* d : x->devices) d->port->set_receiver(nullptr);
      x->service.reset();
    }
  });
  return l;
}

}  // namespace

Library* lib() noexcept {
  static Library* l = init();
  if (!l) errno = ENOSYS;
  return l;
}

cm::Cm& cm_of(Library& l) noexcept { return *l.cm; }
const std::vector<Device*>& devices(Library& l) noexcept { return l.devices; }

Device* device_of(Library& l, const cm::GsiPort* port) noexcept {
  for (Device* d : l.devices)
    if (d->port == port) return d;
  return nullptr;
}

ibv_pd* default_pd(Device& d) noexcept {
  std::lock_guard g(d.mu);
  if (!d.pd) d.pd = ibv_alloc_pd(d.ctx);
  return d.pd;
}

ibv_xrcd* default_xrcd(Device& d) noexcept {
  std::lock_guard g(d.mu);
  if (!d.xrcd) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = -1;
    a.oflags = O_CREAT;
    d.xrcd = ibv_open_xrcd(d.ctx, &a);
  }
  return d.xrcd;
}

// ------------------------------------------------------------------ errors

int fail(const char* fn, const Status& s) noexcept {
  UROCE_LOG(warn, "%s: %s", fn, s.to_string().c_str());
  errno = s.code();
  return -1;
}

int fail(const char* fn, int err, const char* why) noexcept {
  UROCE_LOG(warn, "%s: %s: %s", fn, strerrorname_np(err), why);
  errno = err;
  return -1;
}

std::optional<Endpoint> endpoint_of(const sockaddr* sa) noexcept {
  if (!sa) return std::nullopt;
  switch (sa->sa_family) {
    case AF_INET: return Endpoint::from_sockaddr(sa, sizeof(sockaddr_in));
    case AF_INET6: return Endpoint::from_sockaddr(sa, sizeof(sockaddr_in6));
    default: return std::nullopt;
  }
}

// ------------------------------------------------------------------ ids' fields

namespace {

void put_gid(ibv_gid& g, const IpAddr& a) { std::memcpy(g.raw, a.bytes().data(), 16); }

void put_sockaddr(sockaddr_storage& ss, const Endpoint& ep) {
  std::memset(&ss, 0, sizeof ss);
  ep.to_sockaddr(ss);
}

}  // namespace

void refresh(CmId& c, const cm::IdView& v, Library& l) noexcept {
  // Two threads may refresh one id at once: the caller of an operation
  // (sync_fields, after it) and the thread an event of that operation is
  // delivered in (rping resolves the route in its CM thread while its main
  // thread is still returning from rdma_resolve_addr).
  static std::mutex fields_mu;
  std::lock_guard g(fields_mu);
  rdma_cm_id& id = c.id;
  if (v.port) {
    c.dev = device_of(l, v.port);
    if (c.dev) id.verbs = c.dev->ctx;
    if (c.dev && !id.pd) id.pd = c.dev->pd;
    id.port_num = 1;
  }
  const bool bound = v.state != cm::State::idle;
  if (bound) put_sockaddr(id.route.addr.src_storage, v.src);
  if (!v.dst.addr.is_unspecified()) put_sockaddr(id.route.addr.dst_storage, v.dst);
  rdma_ib_addr& ib = id.route.addr.addr.ibaddr;
  if (v.port) put_gid(ib.sgid, v.port->address());
  put_gid(ib.dgid, v.dgid.is_unspecified() ? v.dst.addr : v.dgid);
  ib.pkey = htons(0xffff);
  if (v.route_resolved) {
    ibv_sa_path_rec& p = c.path;
    std::memset(&p, 0, sizeof p);
    p.dgid = ib.dgid;
    p.sgid = ib.sgid;
    p.flow_label = htonl(v.flow_label);
    p.hop_limit = v.hop_limit;
    p.traffic_class = v.tos;
    p.reversible = 1;
    p.numb_path = 1;
    p.pkey = htons(0xffff);
    p.mtu_selector = 2;  // exactly
    p.mtu = v.path_mtu;
    p.rate_selector = 2;
    p.rate = 0;
    p.packet_life_time_selector = 2;
    p.packet_life_time = 12;
    id.route.path_rec = &p;
    id.route.num_paths = 1;
  }
}

// ------------------------------------------------------------------ events

namespace {

cm::IdView view_locked(const cm::Id& id) {
  // Under the Cm's lock (we are its sink): read the id directly.
  cm::IdView v;
  v.state = id.state();
  v.port = id.port();
  v.src = id.src();
  v.dst = id.dst();
  v.dgid = id.dgid();
  v.route_resolved = id.route_resolved();
  v.path_mtu = id.path_mtu();
  v.tos = id.tos();
  return v;
}

ibv_qp_type qp_type_of(cm::QpType t) {
  switch (t) {
    case cm::QpType::ud: return IBV_QPT_UD;
    case cm::QpType::uc: return IBV_QPT_UC;
    case cm::QpType::xrc_send: return IBV_QPT_XRC_SEND;
    case cm::QpType::xrc_recv: return IBV_QPT_XRC_RECV;
    default: return IBV_QPT_RC;
  }
}

// The id of a connection request, inheriting from its listener.
CmId* new_child(Library& l, CmId& listen, cm::Id& core) {
  auto* c = new CmId{};
  c->core = &core;
  core.user = c;
  c->id.context = listen.id.context;
  c->id.ps = listen.id.ps;
  c->id.qp_type = qp_type_of(core.qp_type());
  if (listen.sync) {  // rdma_get_request's ids are synchronous, each on its own channel
    c->sync = true;
    c->chan = new_channel(true);
  } else {
    c->chan = listen.chan;
  }
  c->id.channel = &c->chan->ch;
  refresh(*c, view_locked(core), l);
  return c;
}

void Sink::deliver(cm::Event&& e) noexcept {
  const bool request = e.type == cm::EventType::connect_request;
  CmId* listen = e.listen_id ? static_cast<CmId*>(e.listen_id->user) : nullptr;
  CmId* id = static_cast<CmId*>(e.id->user);
  if (!id) {
    if (!listen) return;  // cannot happen: only requests create ids
    id = new_child(*lib, *listen, *e.id);
  }
  if (request || e.type == cm::EventType::addr_resolved || e.type == cm::EventType::route_resolved)
    refresh(*id, view_locked(*e.id), *lib);
  if (request) {
    id->req_responder_resources = e.responder_resources;
    id->req_initiator_depth = e.initiator_depth;
  }
  auto* box = new EventBox{};
  rdma_cm_event& ev = box->ev;
  ev.id = &id->id;
  ev.listen_id = listen ? &listen->id : nullptr;
  ev.event = rdma_cm_event_type(uint8_t(e.type));
  ev.status = e.status;
  const size_t n = std::min(e.private_data.size(), sizeof box->data);
  if (n) std::memcpy(box->data, e.private_data.data(), n);
  if (e.ud || id->id.qp_type == IBV_QPT_UD) {
    rdma_ud_param& u = ev.param.ud;
    u.private_data = n ? box->data : nullptr;
    u.private_data_len = uint8_t(n);
    u.ah_attr.is_global = 1;
    put_gid(u.ah_attr.grh.dgid, e.ud_dgid);
    u.ah_attr.grh.sgid_index = 0;
    u.ah_attr.grh.hop_limit = e.ud_hop_limit;
    u.ah_attr.grh.traffic_class = e.ud_traffic_class;
    u.ah_attr.port_num = 1;
    u.qp_num = e.qp_num;
    u.qkey = e.qkey;
  } else {
    rdma_conn_param& p = ev.param.conn;
    p.private_data = n ? box->data : nullptr;
    p.private_data_len = uint8_t(n);
    p.responder_resources = e.responder_resources;
    p.initiator_depth = e.initiator_depth;
    p.flow_control = e.flow_control;
    p.retry_count = e.retry_count;
    p.rnr_retry_count = e.rnr_retry_count;
    p.srq = e.srq;
    p.qp_num = e.qp_num;
  }
  // A request is counted, and queued, on its listener (its id is new).
  box->owner = request ? listen : id;
  push_event(*(request ? listen : id)->chan, box);
}

}  // namespace

}  // namespace uroce::rdmacm
