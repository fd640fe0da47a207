// The packet trace (pcap_io.hpp).
#include "net/pcap_io.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "wire/icrc.hpp"

namespace uroce::net {
namespace {

constexpr uint32_t kMagicNs = 0xa1b23c4d;  // classic pcap, nanosecond timestamps
constexpr uint32_t kLinkEthernet = 1;
constexpr uint32_t kSnapLen = 65535;

void put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(uint8_t(x >> 8));
  v.push_back(uint8_t(x));
}

void put_le32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(uint8_t(x >> (8 * i)));
}

// One's complement sum of 16-bit big-endian words.
uint32_t sum16(std::span<const uint8_t> b, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < b.size(); i += 2) s += uint32_t(b[i]) << 8 | b[i + 1];
  if (b.size() & 1) s += uint32_t(b.back()) << 8;
  return s;
}

uint16_t fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(~s);
}

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

std::vector<uint8_t> ethernet_frame(const FrameFields& f, std::span<const std::span<const uint8_t>> parts) {
  size_t payload = 0;
  for (const auto& p : parts) payload += p.size();
  const bool v4 = f.src.addr.is_v4();
  const size_t udp_len = 8 + payload;
  std::vector<uint8_t> v;
  v.reserve(14 + 40 + udp_len);
  v.insert(v.end(), 12, 0);  // destination and source MAC
  put16(v, v4 ? 0x0800 : 0x86dd);
  const size_t ip_at = v.size();
  if (v4) {
    v.push_back(0x45);
    v.push_back(f.tos);
    put16(v, uint16_t(20 + udp_len));
    put16(v, f.ipv4_id);
    put16(v, f.ipv4_frag);
    v.push_back(f.ttl);
    v.push_back(17);  // UDP
    put16(v, 0);      // checksum, below
    v.insert(v.end(), f.src.addr.bytes().begin() + 12, f.src.addr.bytes().end());
    v.insert(v.end(), f.dst.addr.bytes().begin() + 12, f.dst.addr.bytes().end());
    const uint16_t c = fold(sum16({v.data() + ip_at, 20}));
    v[ip_at + 10] = uint8_t(c >> 8);
    v[ip_at + 11] = uint8_t(c);
  } else {
    put16(v, uint16_t(0x6000 | uint16_t(f.tos) << 4));  // version, traffic class, flow label 0
    put16(v, 0);
    put16(v, uint16_t(udp_len));
    v.push_back(17);
    v.push_back(f.ttl);
    v.insert(v.end(), f.src.addr.bytes().begin(), f.src.addr.bytes().end());
    v.insert(v.end(), f.dst.addr.bytes().begin(), f.dst.addr.bytes().end());
  }
  const size_t udp_at = v.size();
  put16(v, f.src.port);
  put16(v, f.dst.port);
  put16(v, uint16_t(udp_len));
  put16(v, 0);  // checksum: none over IPv4 (RoCEv2 NICs send none); over IPv6 below
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  if (!v4) {
    uint32_t s = sum16({v.data() + ip_at + 8, 32});  // source and destination address
    s += uint32_t(udp_len) + 17;
    s = sum16({v.data() + udp_at, udp_len}, s);
    uint16_t c = fold(s);
    if (c == 0) c = 0xffff;
    v[udp_at + 6] = uint8_t(c >> 8);
    v[udp_at + 7] = uint8_t(c);
  }
  return v;
}

Result<std::unique_ptr<PcapIo>> PcapIo::wrap(std::unique_ptr<PacketIo> inner, const std::string& path) {
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
  return std::unique_ptr<PcapIo>(new PcapIo(std::move(inner), std::move(fd)));
}

void PcapIo::record(const FrameFields& f, std::span<const std::span<const uint8_t>> parts) noexcept {
  try {
    const std::vector<uint8_t> frame = ethernet_frame(f, parts);
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    const uint32_t len = uint32_t(std::min<size_t>(frame.size(), kSnapLen));
    rec_.clear();
    put_le32(rec_, uint32_t(ts.tv_sec));
    put_le32(rec_, uint32_t(ts.tv_nsec));
    put_le32(rec_, len);
    put_le32(rec_, uint32_t(frame.size()));
    rec_.insert(rec_.end(), frame.begin(), frame.begin() + len);
    (void)write_all(fd_.get(), rec_);  // one append per record: whole among other writers
  } catch (...) {
    // Out of memory: the trace misses a packet, the NIC goes on.
  }
}

size_t PcapIo::send_batch(std::span<const TxPacket> pkts) noexcept {
  const size_t n = inner_->send_batch(pkts);
  const Endpoint me = inner_->local();
  uint16_t train_left = 0, train_index = 0;
  for (const TxPacket& p : pkts) {
    if (train_left == 0) {
      train_left = std::max<uint16_t>(1, p.gso_segments);
      train_index = 0;
    }
    FrameFields f;
    f.src = me;
    f.dst = p.dst;
    f.tos = p.tos;
    f.ipv4_id = p.gso_segments > 1 || train_index > 0 ? train_index : inner_->tx_ipv4_id();
    f.ipv4_frag = inner_->tx_ipv4_frag();
    const std::span<const uint8_t> parts[] = {p.head, p.body, p.tail};
    record(f, parts);
    --train_left;
    ++train_index;
  }
  return n;
}

size_t PcapIo::recv_batch(std::span<RxPacket> out) noexcept {
  const size_t n = inner_->recv_batch(out);
  const uint16_t port = inner_->local().port;
  for (size_t i = 0; i < n; ++i) {
    const RxPacket& p = out[i];
    if (p.truncated) continue;
    FrameFields f;
    f.src = p.src;
    f.dst = Endpoint{p.dst, p.dst.is_multicast() ? uint16_t(4791) : port};
    f.tos = p.tos;
    f.ttl = p.ttl ? p.ttl : 64;
    if (f.src.addr.is_v4()) {
      // The ID the sender's ICRC covers (the NIC's own check solves it too).
      wire::IpUdpFields ip{p.src.addr, p.dst, p.src.port, f.dst.port, p.ipv4_id_hint, 0x4000};
      uint16_t id = p.ipv4_id_hint;
      if (wire::verify_icrc(ip, p.data, &id) == wire::IcrcCheck::bad) id = p.ipv4_id_hint;
      f.ipv4_id = id;
    }
    const std::span<const uint8_t> parts[] = {p.data};
    record(f, parts);
  }
  return n;
}

}  // namespace uroce::net
