// Reading and writing classic pcap files for tests (pcapng is refused: none
// of the captures in tests/data use it).
//
// File header (24 bytes, in the writer's byte order; the magic tells which):
//   magic a1b2c3d4 (usec) / a1b23c4d (nsec) | version 2.4 | thiszone | sigfigs
//   | snaplen | linktype
// Record: ts_sec | ts_usec | incl_len | orig_len | incl_len bytes
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "wire/ip_header.hpp"

namespace uroce::test {

inline constexpr uint32_t kLinktypeNull = 0;  // BSD loopback: 4-byte family
inline constexpr uint32_t kLinktypeEthernet = 1;
inline constexpr uint32_t kLinktypeRaw = 101;   // raw IPv4/IPv6
inline constexpr uint32_t kLinktypeLoop = 108;  // OpenBSD loopback
inline constexpr uint32_t kLinktypeSll = 113;   // Linux cooked v1
inline constexpr uint32_t kLinktypeSll2 = 276;  // Linux cooked v2

struct PcapFrame {
  uint32_t ts_sec = 0;
  uint32_t ts_frac = 0;  // micro- or nanoseconds, see PcapFile::nanosecond
  uint32_t orig_len = 0;
  std::vector<uint8_t> data;  // the captured bytes (incl_len of them)
};

struct PcapFile {
  uint32_t linktype = 0;
  uint32_t snaplen = 0;
  bool nanosecond = false;
  std::vector<PcapFrame> frames;
};

// Reads a whole classic pcap file.  A truncated last record is an error.
Result<PcapFile> read_pcap(const std::string& path);

// The IP packet inside a link-layer frame: Ethernet (with 802.1Q/802.1ad
// tags), Linux SLL/SLL2, raw IP, BSD loopback.  nullopt for other link
// types, non-IP ethertypes and frames too short for their link header.
std::optional<std::span<const uint8_t>> strip_link(uint32_t linktype, std::span<const uint8_t> frame);

// One RoCEv2 packet of a capture: its IP/UDP header fields and UDP payload
// (BTH .. ICRC).  Spans point into the PcapFile, which must outlive this.
struct RoceFrame {
  size_t index = 0;  // 0-based frame number in the file
  wire::ParsedIpUdp ip;
  std::span<const uint8_t> payload() const { return ip.udp_payload; }
};

// Every frame of `file` that is UDP to `port`, in order.  Frames that are
// not IP/UDP or go to another port are skipped.
std::vector<RoceFrame> roce_frames(const PcapFile& file, uint16_t port = wire::kRoceUdpPort);

// Writes a pcap (microsecond timestamps, little-endian) of IP packets, either
// bare (kLinktypeRaw) or in Ethernet frames between two made-up MACs
// (02:00:00:00:00:01 -> 02:00:00:00:00:02).
class PcapWriter {
 public:
  PcapWriter() = default;
  ~PcapWriter();
  PcapWriter(PcapWriter&& o) noexcept;
  PcapWriter& operator=(PcapWriter&& o) noexcept;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  static Result<PcapWriter> create(const std::string& path, uint32_t linktype = kLinktypeRaw);

  // Appends one IP packet; the timestamp counts up by 1 us per packet.
  Status write_ip(std::span<const uint8_t> ip_packet);
  Status close();

 private:
  std::FILE* f_ = nullptr;
  uint32_t linktype_ = kLinktypeRaw;
  uint64_t count_ = 0;
};

}  // namespace uroce::test
