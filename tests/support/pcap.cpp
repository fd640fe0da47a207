#include "support/pcap.hpp"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "wire/bytes.hpp"

namespace uroce::test {

namespace {

constexpr uint32_t kMagicUsec = 0xa1b2c3d4, kMagicNsec = 0xa1b23c4d;
constexpr uint32_t kMagicPcapng = 0x0a0d0d0a;
constexpr size_t kFileHeaderLen = 24, kRecordHeaderLen = 16;
constexpr uint16_t kEthIpv4 = 0x0800, kEthIpv6 = 0x86dd, kEthVlan = 0x8100, kEthQinQ = 0x88a8;
constexpr size_t kEthHeaderLen = 14;

uint32_t bswap32(uint32_t v) { return __builtin_bswap32(v); }

// Reads a 32-bit field in the file's byte order.
struct Order {
  bool swap = false;
  uint32_t u32(const uint8_t* p) const {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return swap ? bswap32(v) : v;
  }
};

std::optional<std::span<const uint8_t>> ip_by_ethertype(uint16_t et, std::span<const uint8_t> l3) {
  if (et != kEthIpv4 && et != kEthIpv6) return std::nullopt;
  return l3;
}

void put32(std::FILE* f, uint32_t v) { std::fwrite(&v, 4, 1, f); }  // host (little) endian
void put16(std::FILE* f, uint16_t v) { std::fwrite(&v, 2, 1, f); }

}  // namespace

Result<PcapFile> read_pcap(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err::noent("read_pcap: cannot open " + path);
  const std::vector<uint8_t> data{std::istreambuf_iterator<char>(in), {}};
  if (data.size() < kFileHeaderLen) return err::inval(path + ": shorter than a pcap header");

  uint32_t magic;
  std::memcpy(&magic, data.data(), 4);
  PcapFile file;
  Order o;
  if (magic == kMagicUsec || magic == kMagicNsec) {
    o.swap = false;
  } else if (bswap32(magic) == kMagicUsec || bswap32(magic) == kMagicNsec) {
    o.swap = true;
  } else if (magic == kMagicPcapng) {
    return err::notsup(path + ": pcapng is not supported");
  } else {
    return err::inval(path + ": not a pcap file");
  }
  file.nanosecond = o.u32(data.data()) == kMagicNsec;
  file.snaplen = o.u32(data.data() + 16);
  file.linktype = o.u32(data.data() + 20) & 0x0fffffff;  // upper bits: FCS info

  size_t off = kFileHeaderLen;
  while (off < data.size()) {
    if (data.size() - off < kRecordHeaderLen)
      return err::inval(path + ": truncated record header at " + std::to_string(off));
    PcapFrame fr;
    fr.ts_sec = o.u32(data.data() + off);
    fr.ts_frac = o.u32(data.data() + off + 4);
    const uint32_t incl = o.u32(data.data() + off + 8);
    fr.orig_len = o.u32(data.data() + off + 12);
    off += kRecordHeaderLen;
    if (data.size() - off < incl) return err::inval(path + ": truncated record at " + std::to_string(off));
    fr.data.assign(data.begin() + off, data.begin() + off + incl);
    off += incl;
    file.frames.push_back(std::move(fr));
  }
  return file;
}

std::optional<std::span<const uint8_t>> strip_link(uint32_t linktype, std::span<const uint8_t> fr) {
  using wire::load_be16;
  switch (linktype) {
    case kLinktypeEthernet: {
      if (fr.size() < kEthHeaderLen) return std::nullopt;
      size_t off = 12;
      uint16_t et = load_be16(fr.data() + off);
      while (et == kEthVlan || et == kEthQinQ) {  // skip 4-byte tags
        off += 4;
        if (fr.size() < off + 2) return std::nullopt;
        et = load_be16(fr.data() + off);
      }
      return ip_by_ethertype(et, fr.subspan(off + 2));
    }
    case kLinktypeSll:  // 16 bytes, protocol at 14
      if (fr.size() < 16) return std::nullopt;
      return ip_by_ethertype(load_be16(fr.data() + 14), fr.subspan(16));
    case kLinktypeSll2:  // 20 bytes, protocol at 0
      if (fr.size() < 20) return std::nullopt;
      return ip_by_ethertype(load_be16(fr.data()), fr.subspan(20));
    case kLinktypeRaw: return fr;
    case kLinktypeNull:
    case kLinktypeLoop:
      if (fr.size() < 4) return std::nullopt;
      return fr.subspan(4);
    default: return std::nullopt;
  }
}

std::vector<RoceFrame> roce_frames(const PcapFile& file, uint16_t port) {
  std::vector<RoceFrame> out;
  for (size_t i = 0; i < file.frames.size(); ++i) {
    const auto l3 = strip_link(file.linktype, file.frames[i].data);
    if (!l3) continue;
    auto ip = wire::parse_ip_udp(*l3);
    if (!ip || ip->fields.dst_port != port) continue;
    out.push_back(RoceFrame{i, *ip});
  }
  return out;
}

PcapWriter::~PcapWriter() { (void)close(); }

PcapWriter::PcapWriter(PcapWriter&& o) noexcept
    : f_(std::exchange(o.f_, nullptr)), linktype_(o.linktype_), count_(o.count_) {}

PcapWriter& PcapWriter::operator=(PcapWriter&& o) noexcept {
  if (this != &o) {
    (void)close();
    f_ = std::exchange(o.f_, nullptr);
    linktype_ = o.linktype_;
    count_ = o.count_;
  }
  return *this;
}

Result<PcapWriter> PcapWriter::create(const std::string& path, uint32_t linktype) {
  if (linktype != kLinktypeRaw && linktype != kLinktypeEthernet)
    return err::inval("PcapWriter: only raw IP or Ethernet");
  PcapWriter w;
  w.f_ = std::fopen(path.c_str(), "wb");
  if (!w.f_) return err::from_errno(errno, "PcapWriter: cannot create " + path);
  w.linktype_ = linktype;
  static_assert(std::endian::native == std::endian::little);
  put32(w.f_, kMagicUsec);
  put16(w.f_, 2);
  put16(w.f_, 4);
  put32(w.f_, 0);       // thiszone
  put32(w.f_, 0);       // sigfigs
  put32(w.f_, 262144);  // snaplen
  put32(w.f_, linktype);
  return w;
}

Status PcapWriter::write_ip(std::span<const uint8_t> ip) {
  if (!f_) return err::inval("PcapWriter: not open");
  static constexpr uint8_t kMacs[12] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1};
  const bool eth = linktype_ == kLinktypeEthernet;
  const uint32_t len = uint32_t(ip.size() + (eth ? kEthHeaderLen : 0));
  put32(f_, uint32_t(1700000000 + count_ / 1000000));
  put32(f_, uint32_t(count_ % 1000000));
  put32(f_, len);
  put32(f_, len);
  if (eth) {
    const uint16_t et = !ip.empty() && ip[0] >> 4 == 6 ? kEthIpv6 : kEthIpv4;
    const uint8_t etb[2] = {uint8_t(et >> 8), uint8_t(et)};
    std::fwrite(kMacs, 1, sizeof kMacs, f_);
    std::fwrite(etb, 1, 2, f_);
  }
  if (!ip.empty() && std::fwrite(ip.data(), 1, ip.size(), f_) != ip.size()) return err::io("PcapWriter: write failed");
  ++count_;
  return {};
}

Status PcapWriter::close() {
  if (!f_) return {};
  const int rc = std::fclose(std::exchange(f_, nullptr));
  return rc == 0 ? Status{} : err::io("PcapWriter: close failed");
}

}  // namespace uroce::test
