// Completion channels and asynchronous events: ibv_create_comp_channel,
// ibv_get_cq_event, ibv_ack_cq_events, ibv_destroy_comp_channel,
// ibv_get_async_event, ibv_ack_async_event, and the names of events.
//
// Both kinds of events come through real file descriptors (eventfds of the
// core): applications poll() them and may make them non-blocking.  A
// thread blocked in ibv_get_cq_event processes the packets that wake it.
#include "compat.hpp"

namespace uroce::compat {

void wait_async_acked(pthread_mutex_t& mu, pthread_cond_t& cond, const uint32_t& completed,
                      const uint32_t& delivered) noexcept {
  pthread_mutex_lock(&mu);
  while (completed != delivered) pthread_cond_wait(&cond, &mu);
  pthread_mutex_unlock(&mu);
}

}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

namespace {

// The object an async event is about, by event type.
enum class Kind { cq, qp, srq, port, device };

Kind kind_of(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_CQ_ERR: return Kind::cq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: return Kind::qp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: return Kind::srq;
    case IBV_EVENT_DEVICE_FATAL: return Kind::device;
    default: return Kind::port;
  }
}

}  // namespace

UROCE_C_API ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  Context* c = checked("ibv_create_comp_channel", context);
  if (!c) return nullptr;
  auto core = verbs::CompChannel::create(*c->core);
  if (!core.ok()) return fail_null<ibv_comp_channel>("ibv_create_comp_channel", core.status());
  auto* ch = new Channel{};
  ch->core = core->release();
  ch->ctx = c;
  ch->ch.context = context;
  ch->ch.fd = ch->core->fd();
  ch->ch.refcnt = 0;
  c->handles.add_channel(ch->ch.fd, ch);
  return &ch->ch;
}

UROCE_C_API int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  Channel* ch = checked("ibv_destroy_comp_channel", channel);
  if (!ch) return errno;
  if (ch->core->users().load() > 0) return fail("ibv_destroy_comp_channel", EBUSY, "CQs still use this channel");
  ch->ctx->handles.remove(ObjKind::channel, uint32_t(channel->fd));
  delete ch->core;
  delete ch;
  return 0;
}

UROCE_C_API int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  Channel* ch = checked("ibv_get_cq_event", channel);
  if (!ch) return -1;
  auto r = ch->core->get_event();
  if (!r.ok()) {
    // EAGAIN on a non-blocking fd is the normal "nothing yet": not logged.
    if (r.status().code() != EAGAIN) fail("ibv_get_cq_event", r.status());
    errno = r.status().code();
    return -1;
  }
  Cq* q = static_cast<Cq*>((*r)->user_context());
  *cq = ibv_cq_ex_to_cq(&q->ex);
  *cq_context = q->ex.cq_context;
  return 0;
}

// Not looked up by handle, as in rdma-core: the ack ibv_destroy_cq waits
// for comes while the CQ's handle is already gone.  The core's count goes
// last, since it may let that destroy free the CQ.
UROCE_C_API void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!cq) return;
  Cq* q = to_cq(cq);
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_mutex_unlock(&cq->mutex);
  q->core->ack_events(nevents);
}

UROCE_C_API int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Context* c = checked("ibv_get_async_event", context);
  if (!c) return -1;
  ibv_async_event out{};
  // Counted under the core queue's lock: a destroy that forgets this
  // object's events either drops the event first or then waits for its ack.
  auto r = c->core->get_async_event([&out](const verbs::AsyncEvent& ev) {
    const auto type = static_cast<ibv_event_type>(ev.type);
    out.event_type = type;
    switch (kind_of(type)) {
      case Kind::cq: {
        Cq* q = static_cast<Cq*>(static_cast<verbs::Cq*>(ev.element)->user_context());
        pthread_mutex_lock(&q->ex.mutex);
        ++q->async_delivered;
        pthread_mutex_unlock(&q->ex.mutex);
        out.element.cq = ibv_cq_ex_to_cq(&q->ex);
        break;
      }
      case Kind::qp: {
        Qp* q = static_cast<Qp*>(static_cast<verbs::Qp*>(ev.element)->user_context());
        pthread_mutex_lock(&q->ex.qp_base.mutex);
        ++q->async_delivered;
        pthread_mutex_unlock(&q->ex.qp_base.mutex);
        out.element.qp = &q->ex.qp_base;
        break;
      }
      case Kind::srq: {
        Srq* s = static_cast<Srq*>(static_cast<verbs::Srq*>(ev.element)->user_context());
        pthread_mutex_lock(&s->srq.mutex);
        ++s->async_delivered;
        pthread_mutex_unlock(&s->srq.mutex);
        out.element.srq = &s->srq;
        break;
      }
      case Kind::port: out.element.port_num = int(ev.port_num); break;
      case Kind::device: out.element.port_num = 0; break;
    }
  });
  if (!r.ok()) {
    if (r.status().code() != EAGAIN) fail("ibv_get_async_event", r.status());
    errno = r.status().code();
    return -1;
  }
  *event = out;
  return 0;
}

UROCE_C_API void ibv_ack_async_event(ibv_async_event* event) {
  pthread_mutex_t* mu = nullptr;
  pthread_cond_t* cond = nullptr;
  uint32_t* completed = nullptr;
  switch (kind_of(event->event_type)) {
    case Kind::cq: {
      ibv_cq* cq = event->element.cq;
      mu = &cq->mutex, cond = &cq->cond, completed = &cq->async_events_completed;
      break;
    }
    case Kind::qp: {
      ibv_qp* qp = event->element.qp;
      mu = &qp->mutex, cond = &qp->cond, completed = &qp->events_completed;
      break;
    }
    case Kind::srq: {
      ibv_srq* srq = event->element.srq;
      mu = &srq->mutex, cond = &srq->cond, completed = &srq->events_completed;
      break;
    }
    default: return;
  }
  pthread_mutex_lock(mu);
  ++*completed;
  pthread_cond_broadcast(cond);
  pthread_mutex_unlock(mu);
}
