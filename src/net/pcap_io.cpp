// The packet trace (pcap_io.hpp).
#include "net/pcap_io.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "common/parse_number.hpp"
#include "wire/bytes.hpp"
#include "wire/icrc.hpp"
#include "wire/opcode.hpp"

namespace uroce::net {
namespace {

constexpr uint32_t kMagicNs = 0xa1b23c4d;  // classic pcap, nanosecond timestamps
constexpr uint32_t kLinkEthernet = 1;
constexpr uint32_t kSnapLen = 65535;

void put_le32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(uint8_t(x >> (8 * i)));
}

void store_le32(uint8_t* p, uint32_t x) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(x >> (8 * i));
}

constexpr size_t kEthernetLen = 14;
constexpr size_t kRecordHeaderLen = 16;

bool write_all(int fd, std::span<const uint8_t> b) noexcept {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    b = b.subspan(size_t(n));
  }
  return true;
}

}  // namespace

void append_ethernet_frame(std::vector<uint8_t>& out, const wire::IpUdpFields& ip, const wire::IpVariantFields& v,
                           std::span<const std::span<const uint8_t>> parts) {
  size_t payload = 0;
  for (const auto& p : parts) payload += p.size();
  const size_t at = out.size();
  out.resize(at + kEthernetLen + wire::ip_header_len(ip) + wire::kUdpHeaderLen);
  std::memset(out.data() + at, 0, 12);  // destination and source MAC
  wire::store_be16(out.data() + at + 12, ip.src.is_v4() ? 0x0800 : 0x86dd);
  (void)wire::write_ip_udp_header(ip, v, payload, std::span(out).subspan(at + kEthernetLen));
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  if (!ip.src.is_v4()) {
    const size_t udp = at + kEthernetLen + wire::kIpv6HeaderLen;
    wire::store_be16(out.data() + udp + 6, wire::udp_checksum(ip, std::span(out).subspan(udp)));
  }
}

Result<uint64_t> pcap_count_from_env() {
  const char* v = std::getenv("UROCE_PCAP_COUNT");
  if (!v || !*v) return uint64_t(0);
  const auto n = parse_unsigned<uint64_t>(v);
  if (!n) return err::inval(std::string("UROCE_PCAP_COUNT=") + v + ": expected a number of frames (0: all)");
  return *n;
}

Result<std::unique_ptr<PcapIo>> PcapIo::wrap(std::unique_ptr<PacketIo> inner, const std::string& path,
                                             uint64_t max_frames) {
  if (!inner) return err::inval("PcapIo needs a packet I/O to wrap");
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return err::from_errno(errno, "packet trace " + path);
  // The file header once, however many NICs and processes open it at once.
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR) return err::from_errno(errno, "flock " + path);
  struct stat st;
  Status s;
  if (::fstat(fd.get(), &st) != 0) {
    s = err::from_errno(errno, "fstat " + path);
  } else if (st.st_size == 0) {
    std::vector<uint8_t> h;
    put_le32(h, kMagicNs);
    h.push_back(2);  // version 2.4, little-endian
    h.push_back(0);
    h.push_back(4);
    h.push_back(0);
    put_le32(h, 0);  // thiszone
    put_le32(h, 0);  // sigfigs
    put_le32(h, kSnapLen);
    put_le32(h, kLinkEthernet);
    if (!write_all(fd.get(), h)) s = err::from_errno(errno ? errno : EIO, "writing " + path);
  }
  (void)::flock(fd.get(), LOCK_UN);
  if (!s.ok()) return s;
  return std::unique_ptr<PcapIo>(new PcapIo(std::move(inner), std::move(fd), max_frames));
}

void PcapIo::record(const wire::IpUdpFields& ip, const wire::IpVariantFields& v,
                    std::span<const std::span<const uint8_t>> parts) noexcept {
  if (full()) return;
  ++frames_;
  try {
    rec_.resize(kRecordHeaderLen);
    append_ethernet_frame(rec_, ip, v, parts);  // a datagram's frame is far below kSnapLen
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    const uint32_t len = uint32_t(rec_.size() - kRecordHeaderLen);
    store_le32(rec_.data(), uint32_t(ts.tv_sec));
    store_le32(rec_.data() + 4, uint32_t(ts.tv_nsec));
    store_le32(rec_.data() + 8, len);
    store_le32(rec_.data() + 12, len);
    (void)write_all(fd_.get(), rec_);  // one append per record: whole among other writers
  } catch (...) {
    // Out of memory: the trace misses a packet, the NIC goes on.
  }
}

size_t PcapIo::send_batch(std::span<const TxPacket> pkts) noexcept {
  // The trace shows every packet with its ICRC, even one a same-host
  // peer's ring would have taken without.
  finish_icrcs(pkts);
  const size_t n = inner_->send_batch(pkts);
  if (full()) return n;
  const Endpoint me = inner_->local();
  uint16_t train_left = 0, train_index = 0;
  for (const TxPacket& p : pkts) {
    if (train_left == 0) {
      train_left = std::max<uint16_t>(1, p.gso_segments);
      train_index = 0;
    }
    const uint16_t id = p.gso_segments > 1 || train_index > 0 ? train_index : inner_->tx_ipv4_id();
    const wire::IpUdpFields ip{me.addr, p.dst.addr, me.port, p.dst.port, id, inner_->tx_ipv4_frag()};
    const std::span<const uint8_t> parts[] = {p.head, p.body, p.tail};
    record(ip, {.tos = p.tos}, parts);
    --train_left;
    ++train_index;
  }
  return n;
}

size_t PcapIo::recv_batch(std::span<RxPacket> out) noexcept {
  const size_t n = inner_->recv_batch(out);
  if (full()) return n;
  const uint16_t port = inner_->local().port;
  for (size_t i = 0; i < n; ++i) {
    const RxPacket& p = out[i];
    if (p.truncated) continue;
    // The ID the sender's ICRC covers (the NIC's own check solves it too).
    wire::IpUdpFields ip{p.src.addr,     p.dst,
                         p.src.port,     p.dst.is_multicast() ? wire::kRoceUdpPort : port,
                         p.ipv4_id_hint, wire::kIpv4DontFragment};
    if (p.icrc_omitted && p.data.size() >= wire::kIcrcLen) {
      // A same-host peer left it out (net::kRingTakesNoIcrc): the trace
      // gets the one it would have sent.
      const std::span<const uint8_t> body(p.data.data(), p.data.size() - wire::kIcrcLen);
      uint8_t icrc[wire::kIcrcLen];
      wire::put_icrc(wire::compute_icrc(ip, p.data), icrc);
      const std::span<const uint8_t> parts[] = {body, icrc};
      record(ip, {.tos = p.tos, .ttl = p.ttl ? p.ttl : uint8_t(64)}, parts);
      continue;
    }
    if (ip.src.is_v4()) {
      uint16_t id = ip.ipv4_id;  // left as it is if nothing matches
      (void)wire::verify_icrc(ip, p.data, &id);
      ip.ipv4_id = id;
    }
    const std::span<const uint8_t> parts[] = {p.data};
    record(ip, {.tos = p.tos, .ttl = p.ttl ? p.ttl : uint8_t(64)}, parts);
  }
  return n;
}

}  // namespace uroce::net
