/* A program that opens uroce itself: exec'd by forked children in
 * verbs_fork_test.cpp.  Opens the first device, makes a PD, an MR, a CQ and
 * an RC QP, destroys them, and exits 0 (1 and a message on any failure). */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                  \
  do {                                            \
    if (!(x)) {                                   \
      fprintf(stderr, "helper: %s failed\n", #x); \
      return 1;                                   \
    }                                             \
  } while (0)

int main(void) {
  static char buf[4096];
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n > 0);
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr);
  struct ibv_cq* cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  CHECK(cq);
  struct ibv_qp_init_attr a = {0};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &a);
  CHECK(qp);
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dereg_mr(mr) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
  ibv_free_device_list(list);
  return 0;
}
