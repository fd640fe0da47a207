// The soak's device over libibverbs: <infiniband/verbs.h> and nothing of
// uroce, so the same soak runs through the drop-in libibverbs.so.1
// (src/compat) exactly as an unmodified verbs program would drive it.  The
// work request and completion structures of uroce have the verbs layout and
// values: SendWr converts field by field, Wc is an ibv_wc.
#include "side_ibverbs.hpp"

#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "net/stats_file.hpp"

namespace uroce::soak {
namespace {

static_assert(sizeof(Wc) == sizeof(ibv_wc));
static_assert(int(WrOpcode::rdma_write) == IBV_WR_RDMA_WRITE && int(WrOpcode::rdma_read) == IBV_WR_RDMA_READ &&
              int(WrOpcode::send_with_imm) == IBV_WR_SEND_WITH_IMM &&
              int(WrOpcode::atomic_fetch_and_add) == IBV_WR_ATOMIC_FETCH_AND_ADD &&
              int(WrOpcode::atomic_cmp_and_swp) == IBV_WR_ATOMIC_CMP_AND_SWP);

Status verr(int e, const std::string& what) {
  return err::from_errno(e ? e : EIO, what + ": " + std::strerror(e ? e : EIO));
}

class VerbsSide final : public Side {
 public:
  ~VerbsSide() override {
    for (ibv_qp* q : qps_) ibv_destroy_qp(q);
    for (ibv_cq* c : cqs_) ibv_destroy_cq(c);
    for (ibv_mr* m : mrs_) ibv_dereg_mr(m);
    for (auto& [p, n] : maps_) ::munmap(p, n);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
  }
  Status open(const std::string& name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) return verr(errno, "ibv_get_device_list");
    for (int i = 0; i < n && !ctx_; ++i)
      if (name == ibv_get_device_name(list[i])) ctx_ = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!ctx_) return err::from_errno(ENODEV, "no verbs device " + name + " (UROCE_ADDR names them)");
    name_ = name;
    pd_ = ibv_alloc_pd(ctx_);
    if (!pd_) return verr(errno, "ibv_alloc_pd");
    ibv_gid gid;
    if (ibv_query_gid(ctx_, 1, 0, &gid) != 0) return verr(errno, "ibv_query_gid");
    gid_ = IpAddr::from_bytes(gid.raw);
    return {};
  }
  std::string name() const override { return "libibverbs " + name_; }
  Result<Region> reg(size_t len) override {
    const size_t n = (len + 4095) & ~size_t(4095);
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return verr(errno, "mmap");
    maps_.emplace_back(p, n);
    ibv_mr* mr = ibv_reg_mr(
        pd_, p, len,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr) return verr(errno, "ibv_reg_mr");
    mrs_.push_back(mr);
    return Region{static_cast<uint8_t*>(p), len, mr->lkey, mr->rkey};
  }
  Status create_qps(int n, uint32_t depth) override {
    for (int i = 0; i < n; ++i) {
      ibv_cq* cq = ibv_create_cq(ctx_, int(4 * depth + 16), nullptr, nullptr, 0);
      if (!cq) return verr(errno, "ibv_create_cq");
      cqs_.push_back(cq);
      ibv_qp_init_attr init{};
      init.send_cq = init.recv_cq = cq;
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = init.cap.max_recv_wr = depth;
      init.cap.max_send_sge = init.cap.max_recv_sge = 1;
      ibv_qp* qp = ibv_create_qp(pd_, &init);
      if (!qp) return verr(errno, "ibv_create_qp");
      qps_.push_back(qp);
      psns_.push_back((0x4321u * uint32_t(i + 1)) & 0xffffffu);
    }
    return {};
  }
  QpInfo info(int i) const override { return {gid_, qps_[size_t(i)]->qp_num, psns_[size_t(i)]}; }
  Status connect(int i, const QpInfo& peer, const QpParams& p) override {
    ibv_qp* qp = qps_[size_t(i)];
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return verr(e, "ibv_modify_qp INIT");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = ibv_mtu(int(p.mtu));
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = p.max_rd_atomic;
    a.min_rnr_timer = p.min_rnr_timer;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid.bytes().data(), 16);
    a.ah_attr.grh.hop_limit = 64;
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return verr(e, "ibv_modify_qp RTR");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = psns_[size_t(i)];
    a.timeout = p.timeout;
    a.retry_cnt = p.retry_cnt;
    a.rnr_retry = p.rnr_retry;
    a.max_rd_atomic = p.max_rd_atomic;
    if (int e = ibv_modify_qp(qp, &a,
                              IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_MAX_QP_RD_ATOMIC))
      return verr(e, "ibv_modify_qp RTS");
    return {};
  }
  Status post_send(int i, const SendWr& in) override {
    std::vector<ibv_sge> sges;
    for (const Sge& s : in.sg_list) sges.push_back(ibv_sge{s.addr, s.length, s.lkey});
    ibv_send_wr wr{};
    wr.wr_id = in.wr_id;
    wr.sg_list = sges.data();
    wr.num_sge = int(sges.size());
    wr.opcode = ibv_wr_opcode(int(in.opcode));
    wr.send_flags = in.send_flags;
    wr.imm_data = in.imm_data;
    if (in.opcode == WrOpcode::atomic_fetch_and_add || in.opcode == WrOpcode::atomic_cmp_and_swp) {
      wr.wr.atomic.remote_addr = in.remote_addr;
      wr.wr.atomic.rkey = in.rkey;
      wr.wr.atomic.compare_add = in.compare_add;
      wr.wr.atomic.swap = in.swap;
    } else {
      wr.wr.rdma.remote_addr = in.remote_addr;
      wr.wr.rdma.rkey = in.rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (int e = ibv_post_send(qps_[size_t(i)], &wr, &bad)) return verr(e, "ibv_post_send");
    return {};
  }
  Status post_recv(int i, const RecvWr& in) override {
    std::vector<ibv_sge> sges;
    for (const Sge& s : in.sg_list) sges.push_back(ibv_sge{s.addr, s.length, s.lkey});
    ibv_recv_wr wr{};
    wr.wr_id = in.wr_id;
    wr.sg_list = sges.data();
    wr.num_sge = int(sges.size());
    ibv_recv_wr* bad = nullptr;
    if (int e = ibv_post_recv(qps_[size_t(i)], &wr, &bad)) return verr(e, "ibv_post_recv");
    return {};
  }
  Result<size_t> poll(int i, std::span<Wc> out) override {
    const int n = ibv_poll_cq(cqs_[size_t(i)], int(out.size()), reinterpret_cast<ibv_wc*>(out.data()));
    if (n < 0) return verr(-n, "ibv_poll_cq");
    return size_t(n);
  }
  void sync() override {  // ibv_query_qp takes the NIC lock
    if (qps_.empty()) return;
    ibv_qp_attr a;
    ibv_qp_init_attr init;
    (void)ibv_query_qp(qps_[0], &a, IBV_QP_STATE, &init);
  }
  // Verbs has no counters: read what the NIC publishes for `uroce stat`
  // (at most 100 ms old; wait that long first).
  CounterList counters() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CounterList out;
    auto all = net::read_published_stats(::getpid());
    if (all.ok())
      for (auto& s : *all)
        if (s.device == name_) out = s.counters;
    return out;
  }

 private:
  std::string name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  IpAddr gid_;
  std::vector<std::pair<void*, size_t>> maps_;
  std::vector<ibv_mr*> mrs_;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psns_;
};

}  // namespace

Result<std::unique_ptr<Side>> open_ibverbs_side(const std::string& device) {
  auto s = std::make_unique<VerbsSide>();
  UROCE_TRY(s->open(device));
  return std::unique_ptr<Side>(std::move(s));
}

}  // namespace uroce::soak
