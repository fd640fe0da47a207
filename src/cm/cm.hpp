// The connection manager: rdma_cm's semantics over the IB CM protocol
// (IBA vol. 1 ch. 12) on QP1 of uroce devices.
//
// One Cm per process (librdmacm's), or several in tests.  It owns the
// rdma_cm ids (Id), their connection records (Conn: comm IDs, negotiated QP
// parameters, the MAD to retransmit and its timer), the listener table by
// service ID and the SIDR exchanges.  Inputs: the operations below (called
// by application threads), MADs (on_mad) and time (on_timer), all
// serialised by one mutex.  Outputs: MADs (GsiPort::send), QP transitions
// (QpControl::modify, for ids that carry a QP) and events (EventSink), all
// issued under that mutex -- so neither a sink nor a QpControl may call back
// into the Cm.
//
// Connection states of an id (IBA 12.9.6, active and passive side, and
// 12.11 SIDR): the transitions are the rows of fsm::kTable (fsm.hpp), each
// (state, event [, guard]) -> (action, next state); Cm::row_for looks them
// up and Cm::enter makes them, and `UROCE_LOG=trace` prints each one.
//
// REQ, REP, DREQ and SIDR_REQ are retransmitted on their timers (the peer's
// CM response timeout plus twice the packet lifetime) up to the max CM
// retries; then the id gets UNREACHABLE (REQ, REP, SIDR_REQ: status
// -ETIMEDOUT) or DISCONNECTED (DREQ).  Duplicates are answered as IBA
// 12.9.7 says: a REQ being considered draws an MRA, one already accepted
// the REP again; a duplicate REP (lost RTU) draws the RTU again, a DREQ
// after our DREP the DREP again, a DREQ for an unknown connection a DREP.
//
// Addressing: a REQ (or SIDR_REQ) goes to the UDP port of the process that
// listens for the service on this host (Directory::find_listener), else to
// 4791 (another host, or nobody: a uroce process that owns 4791 answers
// REJ "invalid service ID").  Answers go back to the source port of the
// peer's MAD when the registry confirms that the peer's process (the slot
// in the top 10 bits of its comm ID) receives there, else to 4791 (a
// foreign CM such as Linux's sends from a hashed port).  Our comm IDs are
// slot << 22 | counter: unique on the host.
//
// Peers that vanish: a process killed outright sends no DREQ (on Linux its
// kernel would).  A peer that is a uroce process of this host (the registry
// slot of its comm ID publishes the port its MADs came from) is checked for
// life every Config::peer_check; any other established peer gets a
// keep-alive probe every Config::keepalive (a Get(ClassPortInfo) naming one
// of its comm IDs, which a uroce CM answers for the processes of its host
// and any other CM answers "unsupported").  A dead peer's connections end
// as if its DREQ (its REJ, during the handshake) had come.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "cm/gsi.hpp"
#include "cm/ids.hpp"
#include "cm/liveness.hpp"
#include "cm/mad.hpp"
#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "uroce/types.hpp"

namespace uroce::cm {

using Clock = std::chrono::steady_clock;

// The values of enum rdma_cm_event_type.
enum class EventType : uint8_t {
  addr_resolved = 0,
  addr_error,
  route_resolved,
  route_error,
  connect_request,
  connect_response,
  connect_error,
  unreachable,
  rejected,
  established,
  disconnected,
  device_removal,
  multicast_join,
  multicast_error,
  addr_change,
  timewait_exit,
};
const char* to_string(EventType t) noexcept;

// The verbs values the CM uses: the public API's (equal to rdma-core's
// enum ibv_qp_type, ibv_qp_state, ibv_qp_attr_mask and access flags).
using QpType = verbs::QpType;
using QpState = verbs::QpState;
namespace qp_mask = verbs::qp_attr_mask;

// Access flags of connected QPs.
inline constexpr uint32_t kRemoteAccess =
    verbs::access::kRemoteWrite | verbs::access::kRemoteRead | verbs::access::kRemoteAtomic;

// What rdma_init_qp_attr reports for one transition, in the units of
// struct ibv_qp_attr (path_mtu: IB enum 1..5).
struct QpAttrs {
  uint32_t mask = 0;
  QpState qp_state = QpState::reset;
  uint8_t path_mtu = 0;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  // address vector (kAv): always global (RoCEv2)
  IpAddr dgid;
  uint8_t sgid_index = 0;
  uint32_t flow_label = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint8_t sl = 0;
};

// The QP of an id that carries one: the CM moves it through INIT/RTR/RTS
// when the connection is made (accept, REP) and to ERR on disconnect.
class QpControl {
 public:
  virtual ~QpControl() = default;
  virtual uint32_t qpn() const noexcept = 0;
  // Called under the CM lock: must not call back into the Cm.
  virtual Status modify(const QpAttrs& a) noexcept = 0;
};

// rdma_conn_param (and rdma_ud_param's QPN/Q_Key for UD accepts).
struct ConnParam {
  std::span<const uint8_t> private_data;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t flow_control = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  bool srq = false;
  uint32_t qp_num = 0;  // used when no QP is attached
  uint32_t qkey = 0;    // UD accept: 0 = the port space's Q_Key
};

class Id;

// One rdma_cm event.  Private data is the consumer's part (after the IP CM
// header of a REQ or SIDR_REQ).
struct Event {
  EventType type = EventType::addr_resolved;
  Id* id = nullptr;
  Id* listen_id = nullptr;  // connect_request
  int status = 0;           // 0, a reject reason / SIDR status (> 0) or -errno
  std::vector<uint8_t> private_data;
  // rdma_conn_param
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t flow_control = 0;
  uint8_t retry_count = 0;
  uint8_t rnr_retry_count = 0;
  bool srq = false;
  uint32_t qp_num = 0;
  // rdma_ud_param (UD ids): the peer's address vector, QPN and Q_Key
  bool ud = false;
  IpAddr ud_dgid;
  IpAddr ud_sgid;
  uint8_t ud_hop_limit = 64;
  uint8_t ud_traffic_class = 0;
  uint32_t qkey = 0;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Called under the CM lock, in event order: must not call back into the
  // Cm (it may read the Id through its const accessors).
  virtual void deliver(Event&& ev) noexcept = 0;
};

struct Config {
  // Advertised in REQs as both CM response timeouts (IBA time exponent;
  // 16 = 268 ms): what our timers and the peer's are based on.
  uint8_t cm_response_timeout = 16;
  uint8_t max_cm_retries = 15;
  uint8_t packet_lifetime = 12;      // added twice to every MAD timer
  uint8_t mra_service_timeout = 20;  // what an MRA asks the peer to wait
  uint8_t ack_timeout = 14;          // QP local ACK timeout (67 ms)
  // The RNR NAK timer our responders take at RTR.  0 (655.36 ms), as
  // Linux's CM gives it: a peer that posts its receive late (a Python test,
  // a process delayed under load) is waited for seconds, not milliseconds,
  // before its RNR retries run out.
  uint8_t min_rnr_timer = 0;
  uint8_t hop_limit = 64;
  std::chrono::milliseconds timewait{1000};
  int max_backlog = 1024;
  // A REQ (SIDR_REQ) for a service nobody listens to is held this long
  // before it is refused, in case the listener is about to appear:
  // applications that tell their peer to connect and only then listen
  // (perftest's rdma_cm mode does) rely on the kernel's CM being slower to
  // resolve than they are to listen.  0 refuses at once.
  std::chrono::milliseconds no_listener_grace{100};
  // How often the processes of same-host peers are checked for life while
  // connections to them are up (see Liveness).  0: never.
  std::chrono::milliseconds peer_check{250};
  // Keep-alive of established connections whose peer the registry cannot
  // vouch for (another host): every interval one probe per peer process, a
  // Get(ClassPortInfo) to its CM whose attribute modifier is a comm ID of
  // that process.  A uroce CM answers status 0 if that process lives on its
  // host, 0x1c if not; any other CM answers (Linux's MAD layer: 0x0c
  // "unsupported"), which counts as alive.  keepalive_misses probes in a
  // row unanswered, or a 0x1c, and the connections to that process end as
  // if it had sent a DREQ.  0: no keep-alive.
  std::chrono::milliseconds keepalive{1000};
  int keepalive_misses = 3;
};

enum class State : uint8_t {
  idle,
  addr_bound,
  addr_resolved,
  route_resolved,
  listen,
  req_sent,
  mra_req_rcvd,
  rep_rcvd,
  req_rcvd,
  rep_sent,
  mra_rep_rcvd,
  established,
  dreq_sent,
  dreq_rcvd,
  timewait,
  sidr_req_sent,
  sidr_req_rcvd,
  closed,  // connection over (rejected, unreachable, timewait done)
};
const char* to_string(State s) noexcept;

struct Conn;
namespace fsm {
enum class Ev : uint8_t;
struct Row;
}  // namespace fsm

// An rdma_cm_id.  Owned by the Cm; the application's handle until
// destroy_id().  Accessors may be used under the CM lock (in an EventSink)
// or through Cm::view().
class Id {
 public:
  void* user = nullptr;  // the application layer's object (librdmacm: its rdma_cm_id)

  uint16_t ps() const noexcept { return ps_; }
  QpType qp_type() const noexcept { return qp_type_; }
  State state() const noexcept { return state_; }
  GsiPort* port() const noexcept { return port_; }  // the device; null if unbound or wildcard
  const Endpoint& src() const noexcept { return src_; }
  const Endpoint& dst() const noexcept { return dst_; }
  // The GID the peer's packets go to: dst's address, except for a loopback
  // destination no device holds when the id's device is on a real interface:
  // that loops back to the device (the kernel's rdma_cm sets the dgid to the
  // sgid then).
  const IpAddr& dgid() const noexcept { return dgid_; }
  bool route_resolved() const noexcept { return route_; }
  uint8_t path_mtu() const noexcept { return mtu_; }  // IB enum, once the route is resolved
  uint8_t tos() const noexcept { return tos_; }
  Id* listener() const noexcept { return listener_; }  // a child still waiting for accept/reject

 private:
  friend class Cm;
  friend class IdTable;
  uint16_t ps_ = kPsTcp;
  QpType qp_type_ = QpType::rc;
  State state_ = State::idle;
  GsiPort* port_ = nullptr;
  Endpoint src_, dst_;
  IpAddr dgid_;
  bool bound_ = false;
  bool route_ = false;
  uint8_t mtu_ = 0;
  uint8_t tos_ = 0;
  std::optional<uint8_t> ack_timeout_;
  bool reuseaddr_ = false;
  bool afonly_ = false;
  int backlog_ = 0;
  int pending_ = 0;         // listener: children not yet accepted or rejected
  Id* listener_ = nullptr;  // child: its listener while pending
  bool published_ = false;  // listener: in the Directory
  QpControl* qp_ = nullptr;
  Conn* conn_ = nullptr;
};

// A copy of what the application layer shows of an id.
struct IdView {
  State state = State::idle;
  GsiPort* port = nullptr;
  Endpoint src, dst;
  IpAddr dgid;  // Id::dgid()
  bool route_resolved = false;
  uint8_t path_mtu = 0;
  uint8_t tos = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
};

class Cm {
 public:
  using NowFn = std::function<Clock::time_point()>;

  Cm(Directory& dir, EventSink& sink, Config cfg = {}, NowFn now = {});
  ~Cm();
  Cm(const Cm&) = delete;
  Cm& operator=(const Cm&) = delete;

  const Config& config() const noexcept { return cfg_; }
  // Called (without the lock) when a timer earlier than before may have
  // been armed by an operation: the thread running on_timer() should look
  // at next_deadline() again.
  void set_waker(std::function<void()> w);
  // A device.  The Cm does not own it; it must outlive the Cm.
  void add_port(GsiPort& port);

  // ---- rdma_cm operations (take the CM lock) ----
  Id* create_id(void* user, uint16_t ps, QpType qp_type);
  // Leaves the protocol in order (REJ, DREQ or DREP as the state calls for;
  // a connection being torn down lives on without its id until timewait).
  void destroy_id(Id* id) noexcept;
  // addr: unspecified = any address of its family; port 0 = an ephemeral one.
  Status bind(Id* id, const Endpoint& addr);
  // ADDR_RESOLVED (or ADDR_ERROR) follows.
  Status resolve_addr(Id* id, const std::optional<Endpoint>& src, const Endpoint& dst);
  Status resolve_route(Id* id);  // ROUTE_RESOLVED follows
  Status listen(Id* id, int backlog);
  Status connect(Id* id, const ConnParam& p);
  Status accept(Id* id, const ConnParam& p);
  Status reject(Id* id, std::span<const uint8_t> private_data);
  Status establish(Id* id);
  // `event_follows` tells whether a DISCONNECTED event is still to come.
  Status disconnect(Id* id, bool* event_follows = nullptr);
  // qp_state of `a` selects the transition; fills the rest.
  Status init_qp_attr(Id* id, QpAttrs& a);
  void set_qp(Id* id, QpControl* qp) noexcept;
  Status set_tos(Id* id, uint8_t tos);
  Status set_ack_timeout(Id* id, uint8_t timeout);
  Status set_reuseaddr(Id* id, bool on);
  Status set_afonly(Id* id, bool on);
  // The route of an id given by hand (RDMA_OPTION_IB_PATH): the device that
  // holds `sgid`, the path MTU.  ROUTE_RESOLVED does not follow.
  Status set_route(Id* id, const IpAddr& sgid, const IpAddr& dgid, uint8_t mtu);
  IdView view(const Id* id);
  // Runs `f` under the CM lock: no event is delivered meanwhile.
  void with_lock(const std::function<void()>& f);

  // ---- inputs ----
  void on_mad(GsiPort& port, const GsiMad& mad) noexcept;
  void on_timer() noexcept;
  Clock::time_point next_deadline() noexcept;

  // Tests: connection records alive (with or without an id).
  size_t conn_count();
  // MADs about a connection that came from another address than its peer's
  // (ignored: conn_from_peer).
  uint64_t foreign_mads();

 private:
  friend class Liveness;  // reads the records and config, reports a peer gone
  using Lock = std::unique_lock<std::mutex>;
  // The lock of an operation that may arm a timer: on leaving, it tells the
  // thread that runs on_timer() (through the waker) if one was armed.
  class OpLock {
   public:
    explicit OpLock(Cm& cm) : cm_(cm), g_(cm.mu_) {}
    ~OpLock() {
      std::function<void()> w;
      if (cm_.woke_) w = cm_.waker_;
      cm_.woke_ = false;
      g_.unlock();
      if (w) w();
    }
    OpLock(const OpLock&) = delete;
    OpLock& operator=(const OpLock&) = delete;

   private:
    Cm& cm_;
    Lock g_;
  };

  Clock::time_point now() const { return now_fn_ ? now_fn_() : Clock::now(); }
  uint32_t new_comm_id();
  uint64_t new_tid(uint32_t comm_id) { return uint64_t(++tid_hi_) << 32 | comm_id; }
  Conn* new_conn(Id* id, GsiPort* port, bool active);
  void drop_conn(Conn* c) noexcept;
  void set_state(Conn& c, State s) noexcept;  // of the record and of its id
  // The transition table (fsm.hpp): the row for `ev` on record `c` (null:
  // the id alone), traced; null when the pair has none.
  const fsm::Row* row_for(const Id* id, const Conn* c, fsm::Ev ev) const noexcept;
  // Moves the record and its id (or the id alone) to the row's next state,
  // or its fail state: the one place states change once a row is found.
  void enter(Id* id, Conn* c, const fsm::Row& r, bool failed = false) noexcept;
  void emit(Event&& ev) noexcept;
  void emit_simple(Id* id, EventType t, int status = 0) noexcept;
  void wake() noexcept { woke_ = true; }
  Clock::duration mad_timeout(uint8_t exp) const noexcept;

  // connections (cm_conn.cpp)
  void send(Conn& c, const MadBuf& mad) noexcept;
  void send_retried(Conn& c, Clock::duration timeout, int retries) noexcept;
  void send_rej(GsiPort& port, const Endpoint& to, uint64_t tid, uint32_t local, uint32_t remote, MsgRef msg,
                RejReason reason, std::span<const uint8_t> pd = {}) noexcept;
  void send_rtu(Conn& c) noexcept;
  void send_drep(Conn& c) noexcept;
  void send_mra(Conn& c, MsgRef msg) noexcept;
  void enter_timewait(Conn& c) noexcept;
  void close_conn(Conn& c, bool keep_for_dups) noexcept;
  Status qp_to_rts(Id& id, Conn& c) noexcept;
  void qp_to_err(Id& id) noexcept;
  void fill_qp_attr(const Id& id, const Conn* c, QpAttrs& a) const noexcept;
  void conn_event(Conn& c, EventType t, int status, std::span<const uint8_t> pd) noexcept;
  void on_conn_timer(Conn& c) noexcept;
  Status connect_rc(Id& id, const ConnParam& p, const fsm::Row& row);
  Status connect_ud(Id& id, const ConnParam& p, const fsm::Row& row);
  void send_or_seek(Conn& c) noexcept;
  // The peer process of `c` is gone (Liveness): the table's peer_gone row.
  void peer_gone(Conn& c) noexcept;

  // received MADs (cm_recv.cpp)
  Conn* conn_by_local(uint32_t local_comm_id) const noexcept;
  // The record of our comm ID `local_comm_id`, if `mad` came from that
  // connection's peer.  CM MADs carry no authentication: a third host that
  // guesses the comm IDs must not answer, reject or tear down a connection
  // (counted and logged instead).
  Conn* conn_from_peer(uint32_t local_comm_id, const GsiMad& mad) noexcept;
  // last_chance: a request held for want of a listener (orphans_) is
  // refused now if there still is none.
  void recv_req(GsiPort& port, const GsiMad& mad, const MadHeader& h, bool last_chance = false) noexcept;
  void recv_rep(GsiPort& port, const GsiMad& mad, const MadHeader& h) noexcept;
  void recv_rtu(const GsiMad& mad) noexcept;
  void recv_rej(const GsiMad& mad) noexcept;
  void recv_mra(const GsiMad& mad) noexcept;
  void recv_dreq(GsiPort& port, const GsiMad& mad, const MadHeader& h) noexcept;
  void recv_drep(const GsiMad& mad) noexcept;
  void recv_sidr_req(GsiPort& port, const GsiMad& mad, const MadHeader& h, bool last_chance = false) noexcept;
  // Holds a request that found no listener (see Config::no_listener_grace).
  void hold_orphan(GsiPort& port, const GsiMad& mad, uint32_t peer_comm_id) noexcept;
  void retry_orphans(uint64_t sid, bool last_chance) noexcept;  // sid 0: those due
  void recv_sidr_rep(const GsiMad& mad) noexcept;

  Directory& dir_;
  EventSink& sink_;
  Config cfg_;
  NowFn now_fn_;
  std::function<void()> waker_;
  std::mutex mu_;
  bool woke_ = false;
  std::map<uint32_t, std::unique_ptr<Conn>> conns_;         // by local comm ID
  std::map<std::pair<IpAddr, uint32_t>, Conn*> by_remote_;  // passive: (peer, its comm ID)
  Liveness live_{*this};                                    // after the state it reads
  std::mt19937_64 rng_;
  uint32_t comm_counter_ = 0;
  uint64_t foreign_mads_ = 0;  // MADs about a connection from another address than its peer's
  uint32_t tid_hi_ = 0;
  IdTable ids_{dir_, rng_};  // devices, ids, listeners, waiting requests
};

}  // namespace uroce::cm
