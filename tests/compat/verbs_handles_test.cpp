// Handle checks (issue 17 row 1): a verb given an object whose `handle` was
// altered, whose `context` is another open context, or that names another
// object, fails with the kernel's errno (ENOENT: no such handle in that
// context; EINVAL: the handle names another object; EINVAL: not a context
// this process has open) and leaves the object intact: after every refused
// call the objects still carry a byte-checked message and are destroyed
// normally.  Under ASan (the suite's asan stage) no report either.
#include "verbs_fixture.hpp"

namespace compat_test {
namespace {

// Sets o->*field to `bad`, runs `call` (which returns 0 on success or an
// errno value), restores the field and expects the call to have failed with
// `err`, errno set alike.
template <class Obj, class Field, class Call>
void refused(Obj* o, Field Obj::*field, Field bad, int err, Call&& call, const char* what) {
  SCOPED_TRACE(what);
  const Field keep = o->*field;
  o->*field = bad;
  errno = 0;
  const int r = call();
  const int e = errno;
  o->*field = keep;
  EXPECT_EQ(r, err) << std::strerror(r);
  EXPECT_EQ(e, err) << std::strerror(e);
}

// A call that returns an object: 0 if it (wrongly) succeeded, else errno.
template <class T>
int null_or(T* p) {
  return p ? 0 : errno;
}

}  // namespace

class Handles : public Verbs {
 protected:
  void SetUp() override {
    Verbs::SetUp();
    other_ctx_ = ibv_open_device(list_[0]);  // another open context of the same device
    ASSERT_NE(other_ctx_, nullptr);
  }
  void TearDown() override {
    Verbs::TearDown();
    if (other_ctx_) {
      EXPECT_EQ(ibv_close_device(other_ctx_), 0);
    }
  }

  // The three ways to get an object wrong, each refused by `call`.
  template <class Obj, class Call>
  void all_refused(Obj* o, uint32_t sibling_handle, Call&& call) {
    refused(o, &Obj::handle, o->handle ^ 0x5a5a0000u, ENOENT, call, "garbled handle");
    refused(o, &Obj::context, other_ctx_, ENOENT, call, "another context");
    refused(o, &Obj::handle, sibling_handle, EINVAL, call, "the handle of another object");
  }

  ibv_qp* raw_qp(ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr a{};
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap = {4, srq ? 0u : 4u, 1, srq ? 0u : 1u, 0};
    return ibv_create_qp(pd_, &a);
  }

  // A SEND from a to b, byte-checked: the objects still work.
  void still_works(ibv_qp* a, ibv_qp* b, ibv_cq* ca, ibv_cq* cb) {
    connect(a, b->qp_num);
    connect(b, a->qp_num);
    send_checked(a, ca, b, cb, 777, 1, 100000);
  }

  ibv_context* other_ctx_ = nullptr;
};

TEST_F(Handles, ProtectionDomain) {
  ibv_pd* sibling = ibv_alloc_pd(ctx_);
  ASSERT_NE(sibling, nullptr);
  ibv_cq* c = cq();
  all_refused(pd_, sibling->handle, [&] { return ibv_dealloc_pd(pd_); });
  all_refused(pd_, sibling->handle, [&] { return null_or(ibv_reg_mr(pd_, buf_.data(), 4096, kAllAccess)); });
  all_refused(pd_, sibling->handle, [&] { return null_or(raw_qp(c, c)); });
  ibv_srq_init_attr si{};
  si.attr = {4, 1, 0};
  all_refused(pd_, sibling->handle, [&] { return null_or(ibv_create_srq(pd_, &si)); });
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.grh.dgid = gid_;
  aa.grh.hop_limit = 64;
  aa.port_num = 1;
  all_refused(pd_, sibling->handle, [&] { return null_or(ibv_create_ah(pd_, &aa)); });
  EXPECT_EQ(ibv_dealloc_pd(sibling), 0);
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, c, c);
  still_works(a, b, c, c);
}

TEST_F(Handles, MemoryRegion) {
  ibv_mr* sibling = ibv_reg_mr(pd_, buf_.data(), 4096, kAllAccess);
  ASSERT_NE(sibling, nullptr);
  all_refused(mr_, sibling->handle, [&] { return ibv_dereg_mr(mr_); });
  all_refused(mr_, sibling->handle, [&] {
    return ibv_rereg_mr(mr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE) ==
                   IBV_REREG_MR_ERR_INPUT
               ? errno
               : 0;
  });
  EXPECT_EQ(ibv_dereg_mr(sibling), 0);
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  still_works(qp(IBV_QPT_RC, ca, ca), qp(IBV_QPT_RC, cb, cb), ca, cb);  // mr_ keeps its keys and access
}

TEST_F(Handles, CompletionQueue) {
  ibv_cq* c = cq();
  ibv_cq* sibling = cq();
  all_refused(c, sibling->handle, [&] { return ibv_destroy_cq(c); });
  all_refused(c, sibling->handle, [&] { return ibv_resize_cq(c, 512); });
  all_refused(c, sibling->handle, [&] { return null_or(raw_qp(c, sibling)); });
  all_refused(c, sibling->handle, [&] { return null_or(raw_qp(sibling, c)); });
  EXPECT_EQ(c->cqe, 256);
  still_works(qp(IBV_QPT_RC, c, c), qp(IBV_QPT_RC, sibling, sibling), c, sibling);
}

TEST_F(Handles, ExtendedCompletionQueue) {
  ibv_cq_init_attr_ex ea{};
  ea.cqe = 64;
  ea.wc_flags = IBV_WC_STANDARD_FLAGS;
  ibv_cq_ex* ex = ibv_create_cq_ex(ctx_, &ea);
  ASSERT_NE(ex, nullptr);
  ibv_cq* c = ibv_cq_ex_to_cq(ex);
  ibv_cq* sibling = cq();
  refused(
      ex, &ibv_cq_ex::handle, ex->handle ^ 0x5a5a0000u, ENOENT, [&] { return ibv_destroy_cq(c); }, "garbled");
  refused(
      ex, &ibv_cq_ex::context, other_ctx_, ENOENT, [&] { return ibv_destroy_cq(c); }, "another context");
  refused(
      ex, &ibv_cq_ex::handle, sibling->handle, EINVAL, [&] { return ibv_destroy_cq(c); }, "sibling");
  ibv_qp* a = qp(IBV_QPT_RC, c, c);
  ibv_qp* b = qp(IBV_QPT_RC, sibling, sibling);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ASSERT_EQ(post_recv(b, 1, 100000, 64), 0);
  ibv_sge s = sge(0, 64);
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ibv_poll_cq_attr pa{};
  int r = ENOENT;
  for (auto until = Clock::now() + std::chrono::seconds(5); r == ENOENT && Clock::now() < until;)
    r = ibv_start_poll(ex, &pa);
  ASSERT_EQ(r, 0);
  EXPECT_EQ(ex->wr_id, 42u);
  EXPECT_EQ(ex->status, IBV_WC_SUCCESS);
  ibv_end_poll(ex);
  EXPECT_EQ(poll(sibling, 1).size(), 1u);
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_cq(c), 0);
}

TEST_F(Handles, QueuePair) {
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  all_refused(a, b->handle, [&] { return ibv_destroy_qp(a); });
  all_refused(a, b->handle, [&] { return ibv_query_qp(a, &qa, IBV_QP_STATE, &qi); });
  qa.qp_state = IBV_QPS_ERR;
  all_refused(a, b->handle, [&] { return ibv_modify_qp(a, &qa, IBV_QP_STATE); });
  ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RESET) << "no modify reached the QP";
  still_works(a, b, ca, cb);
}

TEST_F(Handles, SharedReceiveQueue) {
  ibv_srq_init_attr si{};
  si.attr = {8, 1, 0};
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ibv_srq* sibling = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  ASSERT_NE(sibling, nullptr);
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  ibv_srq_attr sa{};
  all_refused(srq, sibling->handle, [&] { return ibv_destroy_srq(srq); });
  all_refused(srq, sibling->handle, [&] { return ibv_query_srq(srq, &sa); });
  sa.srq_limit = 3;
  all_refused(srq, sibling->handle, [&] { return ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT); });
  all_refused(srq, sibling->handle, [&] { return null_or(raw_qp(cb, cb, srq)); });
  ASSERT_EQ(ibv_query_srq(srq, &sa), 0);
  EXPECT_EQ(sa.srq_limit, 0u);
  ibv_qp* a = qp(IBV_QPT_RC, ca, ca);
  ibv_qp* b = qp(IBV_QPT_RC, cb, cb, srq);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ibv_sge r = sge(200000, 100);
  ibv_recv_wr rw{};
  rw.wr_id = 9;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_srq_recv(srq, &rw, &rbad), 0);
  std::fill(buf_.begin(), buf_.begin() + 100, 0x6b);
  ibv_sge s = sge(0, 100);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(poll(ca, 1).size(), 1u);
  auto rb = poll(cb, 1);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb[0].wr_id, 9u);
  EXPECT_EQ(std::memcmp(buf_.data() + 200000, buf_.data(), 100), 0);
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_srq(sibling), 0);
}

TEST_F(Handles, AddressHandle) {
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.grh.dgid = gid_;
  aa.grh.hop_limit = 64;
  aa.port_num = 1;
  ibv_ah* ah = ibv_create_ah(pd_, &aa);
  ibv_ah* sibling = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr);
  ASSERT_NE(sibling, nullptr);
  all_refused(ah, sibling->handle, [&] { return ibv_destroy_ah(ah); });
  EXPECT_EQ(ibv_destroy_ah(sibling), 0);
  // The AH still addresses a UD datagram.
  ibv_cq* c = cq();
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = c;
  qa.qp_type = IBV_QPT_UD;
  qa.cap = {4, 4, 1, 1, 0};
  ibv_qp* u = ibv_create_qp(pd_, &qa);
  ASSERT_NE(u, nullptr);
  qps_.push_back(u);
  connect(u, 0);
  ASSERT_EQ(post_recv(u, 3, 300000, 40 + 32), 0);
  std::fill(buf_.begin(), buf_.begin() + 32, 0x2d);
  ibv_sge s = sge(0, 32);
  ibv_send_wr wr{};
  wr.wr_id = 4;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = u->qp_num;
  wr.wr.ud.remote_qkey = 0x11111111;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(u, &wr, &bad), 0);
  auto wc = poll(c, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(std::memcmp(buf_.data() + 300040, buf_.data(), 32), 0);
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(Handles, CompletionChannel) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ibv_comp_channel* sibling = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ASSERT_NE(sibling, nullptr);
  // A channel's handle is its descriptor.
  refused(
      ch, &ibv_comp_channel::fd, ch->fd + 1000, ENOENT, [&] { return ibv_destroy_comp_channel(ch); }, "fd");
  refused(
      ch, &ibv_comp_channel::context, other_ctx_, ENOENT, [&] { return ibv_destroy_comp_channel(ch); },
      "another context");
  refused(
      ch, &ibv_comp_channel::fd, sibling->fd, EINVAL, [&] { return ibv_destroy_comp_channel(ch); }, "sibling");
  refused(
      ch, &ibv_comp_channel::fd, ch->fd + 1000, ENOENT,
      [&] { return null_or(ibv_create_cq(ctx_, 16, nullptr, ch, 0)); }, "create_cq");
  // A CQ of one context cannot report to another context's channel.
  ibv_comp_channel* foreign = ibv_create_comp_channel(other_ctx_);
  ASSERT_NE(foreign, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, foreign, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq* cq_ = ibv_create_cq(ctx_, 16, nullptr, ch, 0);
  ASSERT_NE(cq_, nullptr);
  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(IBV_QPT_RC, c2, c2);
  ibv_qp* b = qp(IBV_QPT_RC, cq_, cq_);
  connect(a, b->qp_num);
  connect(b, a->qp_num);
  ASSERT_EQ(post_recv(b, 1, 100000, 64), 0);
  ibv_sge s = sge(0, 64);
  ibv_send_wr wr{};
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  pollfd pfd{ch->fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  ibv_cq* got = nullptr;
  void* got_ctx = nullptr;
  refused(
      ch, &ibv_comp_channel::fd, ch->fd + 1000, ENOENT,
      [&] { return ibv_get_cq_event(ch, &got, &got_ctx) == -1 ? errno : 0; }, "get_cq_event");
  ASSERT_EQ(ibv_get_cq_event(ch, &got, &got_ctx), 0);
  EXPECT_EQ(got, cq_);
  ibv_ack_cq_events(got, 1);
  EXPECT_EQ(poll(cq_, 1).size(), 1u);
  EXPECT_EQ(poll(c2, 1).size(), 1u);
  for (auto it = qps_.rbegin(); it != qps_.rend(); ++it) ASSERT_EQ(ibv_destroy_qp(*it), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_cq(cq_), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(sibling), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(foreign), 0);
}

// A context this process does not have open (a copy of one, or one already
// closed) is refused by every verb that takes a context, without being
// read.
TEST_F(Handles, Context) {
  verbs_context copy_storage;
  std::memcpy(&copy_storage, verbs_get_ctx(ctx_), sizeof copy_storage);
  ibv_context* copy = &copy_storage.context;
  errno = 0;
  EXPECT_EQ(ibv_alloc_pd(copy), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(copy, 16, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_comp_channel(copy), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_device_attr da{};
  EXPECT_EQ(ibv_query_device(copy, &da), EINVAL);
  ibv_port_attr pa{};
  EXPECT_EQ(ibv_query_port(copy, 1, &pa), EINVAL);
  ibv_gid g{};
  EXPECT_EQ(ibv_query_gid(copy, 1, 0, &g), -1);
  EXPECT_EQ(errno, EINVAL);
  ibv_async_event ev{};
  EXPECT_EQ(ibv_get_async_event(copy, &ev), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_close_device(copy), EINVAL);

  ibv_context* closed = ibv_open_device(list_[0]);
  ASSERT_NE(closed, nullptr);
  ASSERT_EQ(ibv_close_device(closed), 0);
  EXPECT_EQ(ibv_close_device(closed), EINVAL) << "closing twice";

  // The real one is untouched.
  ASSERT_EQ(ibv_query_device(ctx_, &da), 0);
  EXPECT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  ibv_cq* ca = cq();
  ibv_cq* cb = cq();
  still_works(qp(IBV_QPT_RC, ca, ca), qp(IBV_QPT_RC, cb, cb), ca, cb);
}

}  // namespace compat_test
