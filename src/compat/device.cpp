// Devices, contexts and what can be asked of them: the device list
// (UROCE_ADDR / UROCE_PORT, one device per address), ibv_open_device and
// ibv_close_device, ibv_query_device(_ex), ibv_query_port, the GID and P_Key
// tables, and the sysfs helpers.
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "compat.hpp"
#include "net/interface_index.hpp"
#include "transport/nic.hpp"

#undef ibv_query_port

namespace uroce::compat {
namespace {

// The device list, built once from the environment.  Never freed.
struct DeviceList {
  std::vector<Device*> devices;
  Status status;
};

const DeviceList& device_list() {
  static const DeviceList* list = [] {
    auto* l = new DeviceList;
    auto cfgs = verbs::devices_from_env();
    if (!cfgs.ok()) {
      l->status = cfgs.status();
      std::fprintf(stderr, "uroce: %s\n", cfgs.status().to_string().c_str());
      return l;
    }
    int i = 0;
    for (const auto& c : *cfgs) {
      auto* d = new Device{};
      d->cfg = new verbs::DeviceConfig(c);
      d->index = i++;
      d->dev.node_type = IBV_NODE_CA;
      d->dev.transport_type = IBV_TRANSPORT_IB;  // RoCE devices report IB transport
      std::snprintf(d->dev.name, sizeof d->dev.name, "%s", c.name.c_str());
      std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "%s", c.name.c_str());
      std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/%s", c.name.c_str());
      std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s", c.name.c_str());
      l->devices.push_back(d);
    }
    return l;
  }();
  return *list;
}

ibv_mtu to_ibv_mtu(verbs::Mtu m) { return static_cast<ibv_mtu>(uint8_t(m)); }

void fill_device_attr(const Context& c, ibv_device_attr& a) {
  const verbs::DeviceAttr& d = c.core->device_attr();
  std::memset(&a, 0, sizeof a);
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "uroce %s", UROCE_VERSION);
  a.node_guid = htobe64(d.node_guid);
  a.sys_image_guid = htobe64(d.sys_image_guid);
  a.max_mr_size = d.max_mr_size;
  a.page_size_cap = d.page_size_cap;
  a.vendor_id = d.vendor_id;
  a.vendor_part_id = d.vendor_part_id;
  a.hw_ver = d.hw_ver;
  a.max_qp = int(d.max_qp);
  a.max_qp_wr = int(d.max_qp_wr);
  // What the core does: RNR NAKs, the IB state machine with cur_qp_state,
  // SRQ resize (modify max_wr), the port_num of an AV checked.
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_CURR_QP_STATE_MOD | IBV_DEVICE_SYS_IMAGE_GUID |
                       IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_UD_AV_PORT_ENFORCE | IBV_DEVICE_MEM_WINDOW |
                       IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a.max_sge = int(d.max_sge);
  a.max_sge_rd = int(d.max_sge);
  a.max_cq = int(d.max_cq);
  a.max_cqe = int(d.max_cqe);
  a.max_mr = int(d.max_mr);
  a.max_mw = int(verbs::MwTable::kMaxMws);
  a.max_mcast_grp = int(transport::Nic::kMaxMcastGroups);
  a.max_mcast_qp_attach = int(transport::Nic::kMaxMcastQpAttach);
  a.max_total_mcast_qp_attach = int(transport::Nic::kMaxTotalMcastQpAttach);
  a.max_pd = int(d.max_pd);
  a.max_qp_rd_atom = int(d.max_qp_rd_atom);
  a.max_res_rd_atom = int(std::min<uint64_t>(uint64_t(d.max_qp_rd_atom) * d.max_qp, INT32_MAX));
  a.max_qp_init_rd_atom = int(d.max_qp_init_rd_atom);
  // Atomics are CPU atomic instructions on the target memory, so they are
  // atomic with respect to the CPU as well (IBV_ATOMIC_GLOB would be true);
  // the device reports IBV_ATOMIC_HCA, as rxe and mlx5 do: UCX 1.13 and
  // others enable device atomics for HCA only.
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_ah = int(d.max_ah);
  a.max_srq = int(d.max_srq);
  a.max_srq_wr = int(d.max_srq_wr);
  a.max_srq_sge = int(d.max_srq_sge);
  a.max_pkeys = d.max_pkeys;
  // Coalesced ACKs leave at the latest on the progress thread's 1 ms tick:
  // 4.096 us * 2^8 = 1.05 ms.
  a.local_ca_ack_delay = 8;
  a.phys_port_cnt = 1;
}

void fill_port_attr(const Context& c, ibv_port_attr& p) {
  const verbs::PortAttr& pa = c.core->port_attr();
  std::memset(&p, 0, sizeof p);
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = IBV_MTU_4096;
  p.active_mtu = to_ibv_mtu(pa.active_mtu());
  p.gid_tbl_len = int(pa.gid_tbl_len);
  p.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
  p.max_msg_sz = pa.max_msg_sz;
  {
    transport::Nic& nic = c.core->nic();
    std::lock_guard g(nic.mu());
    p.qkey_viol_cntr = uint32_t(nic.counters().ud_qkey_drops);
  }
  p.pkey_tbl_len = 1;
  p.lid = port_lid(c.core->config());
  p.max_vl_num = 1;
  // No link speed to report: SDR 1X, as the kernel reports an Ethernet
  // device whose speed it does not know.
  p.active_width = 1;
  p.active_speed = 1;
  p.phys_state = 5;  // LinkUp
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
}

}  // namespace

uint16_t port_lid(const verbs::DeviceConfig& cfg) noexcept {
  if (cfg.gids.empty()) return 0;
  const auto& b = cfg.gids[0].bytes();
  const uint16_t lid = uint16_t(b[14] << 8 | b[15]);
  return lid == 0xffff ? 0 : lid;  // 0xffff is the permissive LID
}

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size) {
  Context* c = checked("ibv_query_device_ex", context);
  if (!c) return errno;
  if (input && input->comp_mask) return fail("ibv_query_device_ex", EINVAL, "input comp_mask must be 0");
  if (attr_size < sizeof(ibv_device_attr)) return fail("ibv_query_device_ex", EINVAL, "attr_size too small");
  ibv_device_attr_ex a{};
  fill_device_attr(*c, a.orig_attr);
  // On-demand paging: registration needs no pinning; pages are checked
  // (and faulted in) when a packet touches them.  Implicit ODP too.
  a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  a.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                                              IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.uc_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  a.xrc_odp_caps = a.odp_caps.per_transport_caps.rc_odp_caps;  // XRC runs RC's paths
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
  a.phys_port_cnt_ex = 1;
  // Completion timestamps: the device clock counts nanoseconds in 64 bits.
  a.completion_timestamp_mask = ~uint64_t{0};
  a.hca_core_clock = verbs::kDeviceClockKhz;
  std::memcpy(attr, &a, std::min(attr_size, sizeof a));
  return 0;
}

// The device clock now (IBV_VALUES_MASK_RAW_CLOCK), in the ticks completion
// timestamps count (nanoseconds) as a timespec.
int query_rt_values(ibv_context* context, ibv_values_ex* values) {
  if (!checked("ibv_query_rt_values_ex", context)) return errno;
  if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK))
    return fail("ibv_query_rt_values_ex", EINVAL, "unknown comp_mask bits");
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    const uint64_t ns = verbs::device_clock_ns();
    values->raw_clock.tv_sec = time_t(ns / 1'000'000'000u);
    values->raw_clock.tv_nsec = long(ns % 1'000'000'000u);
  }
  return 0;
}

int query_port_ex(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  Context* c = checked("ibv_query_port", context);
  if (!c) return errno;
  if (port_num != 1) return fail("ibv_query_port", EINVAL, "port_num must be 1");
  ibv_port_attr p;
  fill_port_attr(*c, p);
  std::memcpy(attr, &p, std::min(attr_len, sizeof p));
  return 0;
}

}  // namespace uroce::compat

using namespace uroce;
using namespace uroce::compat;

namespace {

const ibv_context_ops kOps = [] {
  ibv_context_ops o{};
  o._compat_query_device = ibv_query_device;
  o._compat_query_port = ibv_query_port;
  o.alloc_mw = alloc_mw;
  o.bind_mw = bind_mw;
  o.dealloc_mw = dealloc_mw;
  o.poll_cq = poll_cq;
  o.req_notify_cq = req_notify_cq;
  o.post_srq_recv = post_srq_recv;
  o.post_send = post_send;
  o.post_recv = post_recv;
  return o;
}();

bool gid_ok(ibv_context* context, uint32_t port_num, uint32_t index, const char* verb) {
  if (!checked(verb, context)) return false;
  if (port_num != 1) {
    fail(verb, EINVAL, "port_num must be 1");
    return false;
  }
  if (index >= to_ctx(context)->core->config().gids.size()) {
    fail(verb, EINVAL, "GID index beyond the GID table");
    return false;
  }
  return true;
}

void fill_gid_entry(ibv_context* context, uint32_t port_num, uint32_t index, ibv_gid_entry& e) {
  const IpAddr& g = to_ctx(context)->core->config().gids[index];
  std::memset(&e, 0, sizeof e);
  std::memcpy(e.gid.raw, g.bytes().data(), 16);
  e.gid_index = index;
  e.port_num = port_num;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = net::interface_index(g);
}

}  // namespace

UROCE_C_API ibv_device** ibv_get_device_list(int* num_devices) {
  const DeviceList& l = device_list();
  if (num_devices) *num_devices = 0;
  if (!l.status.ok()) return fail_null<ibv_device*>("ibv_get_device_list", l.status);
  auto** out = static_cast<ibv_device**>(std::calloc(l.devices.size() + 1, sizeof(ibv_device*)));
  if (!out) return fail_null<ibv_device*>("ibv_get_device_list", ENOMEM, "out of memory");
  for (size_t i = 0; i < l.devices.size(); ++i) out[i] = &l.devices[i]->dev;
  if (num_devices) *num_devices = int(l.devices.size());
  return out;
}

UROCE_C_API void ibv_free_device_list(ibv_device** list) { std::free(list); }

UROCE_C_API const char* ibv_get_device_name(ibv_device* device) { return device->name; }

UROCE_C_API int ibv_get_device_index(ibv_device* device) { return to_dev(device)->index; }

UROCE_C_API __be64 ibv_get_device_guid(ibv_device* device) { return htobe64(verbs::node_guid(*to_dev(device)->cfg)); }

UROCE_C_API ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = to_dev(device);
  auto core = verbs::Context::open(*d->cfg);
  if (!core.ok()) return fail_null<ibv_context>("ibv_open_device", core.status());
  const int cmd_fd = ::eventfd(0, EFD_CLOEXEC);
  if (cmd_fd < 0) return fail_null<ibv_context>("ibv_open_device", errno, "eventfd for cmd_fd failed");
  auto* c = new Context{};
  c->dev = d;
  c->core = core->release();
  c->cmd_fd = cmd_fd;
  verbs_context& v = c->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = query_port_ex;
  v.advise_mr = advise_mr;
  v.query_device_ex = query_device_ex;
  v.query_rt_values = query_rt_values;
  v.create_cq_ex = create_cq_ex;
  v.create_qp_ex = create_qp_ex;
  v.create_srq_ex = create_srq_ex;
  v.open_xrcd = open_xrcd;
  v.close_xrcd = close_xrcd;
  v.get_srq_num = get_srq_num;
  v.open_qp = open_qp;
  ibv_context& ic = v.context;
  ic.device = device;
  ic.ops = kOps;
  // No kernel device is behind it, but programs (rdma-core's tests, fork
  // helpers) expect a descriptor: an eventfd of its own, closed with it.
  ic.cmd_fd = c->cmd_fd;
  ic.async_fd = c->core->async_fd();
  ic.num_comp_vectors = 1;
  pthread_mutex_init(&ic.mutex, nullptr);
  ic.abi_compat = __VERBS_ABI_IS_EXTENDED;
  context_opened(&ic);
  return &ic;
}

UROCE_C_API int ibv_close_device(ibv_context* context) {
  Context* c = checked("ibv_close_device", context);
  if (!c) return errno;
  if (c->core->users().load() > 0) {
    // rdma-core lets the kernel clean up after a program that closes a
    // device with objects still open; here they would point into a dead
    // context, so it stays (with them) until the process exits.
    UROCE_LOG(warn, "ibv_close_device: %d PD/CQ/channel(s) still open; the device stays open", c->core->users().load());
    return 0;
  }
  context_closed(context);
  delete c->core;
  ::close(c->cmd_fd);
  pthread_mutex_destroy(&context->mutex);
  delete c;
  return 0;
}

UROCE_C_API int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  Context* c = checked("ibv_query_device", context);
  if (!c) return errno;
  fill_device_attr(*c, *device_attr);
  return 0;
}

// The exported ibv_query_port receives the older, shorter port attributes
// (verbs.h's inline wrapper only calls it when the context has no
// query_port op): nothing past `flags` is written.
UROCE_C_API int ibv_query_port(ibv_context* context, uint8_t port_num, struct _compat_ibv_port_attr* port_attr) {
  return query_port_ex(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                       offsetof(ibv_port_attr, port_cap_flags2));
}

UROCE_C_API int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  if (index < 0 || !gid_ok(context, port_num, uint32_t(index), "ibv_query_gid")) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(gid->raw, to_ctx(context)->core->config().gids[index].bytes().data(), 16);
  return 0;
}

UROCE_C_API int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                                  uint32_t flags, size_t entry_size) {
  if (flags) return fail("ibv_query_gid_ex", EINVAL, "flags must be 0");
  if (!gid_ok(context, port_num, gid_index, "ibv_query_gid_ex")) return EINVAL;
  ibv_gid_entry e;
  fill_gid_entry(context, port_num, gid_index, e);
  std::memcpy(entry, &e, std::min(entry_size, sizeof e));
  return 0;
}

UROCE_C_API ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                         uint32_t flags, size_t entry_size) {
  if (!checked("ibv_query_gid_table", context)) return -errno;
  if (flags) return -fail("ibv_query_gid_table", EINVAL, "flags must be 0");
  if (entry_size < sizeof(ibv_gid_entry)) return -fail("ibv_query_gid_table", EINVAL, "entry_size too small");
  const size_t n = to_ctx(context)->core->config().gids.size();
  if (max_entries < n) return -fail("ibv_query_gid_table", EINVAL, "max_entries below the GID table size");
  auto* p = reinterpret_cast<uint8_t*>(entries);
  for (size_t i = 0; i < n; ++i) {
    ibv_gid_entry e;
    fill_gid_entry(context, 1, uint32_t(i), e);
    std::memcpy(p + i * entry_size, &e, sizeof e);
  }
  return ssize_t(n);
}

UROCE_C_API int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                   enum ibv_gid_type_sysfs* type) {
  if (!gid_ok(context, port_num, index, "ibv_query_gid_type")) {
    errno = EINVAL;
    return -1;
  }
  *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
  return 0;
}

UROCE_C_API int ibv_query_pkey(ibv_context* /*context*/, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) {
    fail("ibv_query_pkey", EINVAL, "one port with one P_Key (index 0)");
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

UROCE_C_API int ibv_get_pkey_index(ibv_context* /*context*/, uint8_t port_num, __be16 pkey) {
  if (port_num == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff) return 0;
  fail("ibv_get_pkey_index", ENOENT, "the only P_Key is 0xffff");
  return -1;
}

// ------------------------------------------------------------------ sysfs

UROCE_C_API const char* ibv_get_sysfs_path(void) {
  static const char* path = [] {
    const char* env = std::getenv("SYSFS_PATH");
    return env && *env ? env : "/sys";
  }();
  return path;
}

UROCE_C_API int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[IBV_SYSFS_PATH_MAX * 2];
  std::snprintf(path, sizeof path, "%s/%s", dir, file);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = ::read(fd, buf, size);
  ::close(fd);
  if (n <= 0) return -1;
  size_t len = size_t(n);
  if (len == size) --len;                      // room for the NUL
  if (len > 0 && buf[len - 1] == '\n') --len;  // sysfs files end in a newline
  buf[len] = '\0';
  return int(len);
}

// ------------------------------------------------------------------ import (not supported)

UROCE_C_API ibv_context* ibv_import_device(int /*cmd_fd*/) {
  return fail_null<ibv_context>("ibv_import_device", EOPNOTSUPP, "uroce has no kernel device to share");
}
