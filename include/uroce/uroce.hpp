// uroce: a software RDMA NIC in user space speaking RoCEv2.  The C++ API.
//
//   #include <uroce/uroce.hpp>
//
//   auto ctx = uroce::Context::open("uroce0");       // UROCE_ADDR names devices
//   auto pd  = ctx->alloc_pd();
//   auto cq  = ctx->create_cq(64);
//   auto mr  = pd->reg_mr(buf, len, uroce::access::kLocalWrite | ...);
//   auto qp  = pd->create_qp({.type = uroce::QpType::rc, .send_cq = &*cq, .recv_cq = &*cq});
//   ... exchange qp->local_info() and mr->addr()/rkey() with the peer ...
//   qp->connect(peer_info);
//   qp->post_send(wr);  cq->poll(wcs);
//
// Every factory returns Result<T>: check ok(), then move the value out.
// See fwd.hpp for the object tree and destruction order.
#pragma once

#include "uroce/address_handle.hpp"
#include "uroce/completion.hpp"
#include "uroce/device.hpp"
#include "uroce/faults.hpp"
#include "uroce/fwd.hpp"
#include "uroce/ip_addr.hpp"
#include "uroce/memory.hpp"
#include "uroce/protection_domain.hpp"
#include "uroce/queue_pair.hpp"
#include "uroce/shared_receive_queue.hpp"
#include "uroce/stats.hpp"
#include "uroce/status.hpp"
#include "uroce/types.hpp"
#include "uroce/version.hpp"
