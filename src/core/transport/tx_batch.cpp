#include "transport/tx_batch.hpp"

#include <cstring>

#include "common/fault_guard.hpp"
#include "transport/counters.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {

TxBatch::TxBatch() {
  for (auto& s : slots_) s.bounce = std::make_unique<uint8_t[]>(kBounce);
}

bool TxBatch::add(const Endpoint& dst, const wire::IpUdpFields& ip, wire::Headers& h, std::span<const uint8_t> body,
                  uint8_t tos) noexcept {
  Slot& s = slots_[n_];
  const uint8_t pad = wire::pad_for(body.size());
  h.bth.pad = pad;
  const size_t hlen = wire::encode_headers(h, s.head);
  const size_t udp_len = hlen + body.size() + pad + wire::kIcrcLen;
  // Join the train in the making, or start one.  Packet i of a train gets
  // IPv4 ID base + i from the kernel's segmentation; its ICRC covers that.
  // An ACK, the shortest packet, ends the train it joins: an answer and the
  // ACK held for it leave as one datagram (Nic::pump), which costs the
  // kernel about what one packet does, where two in one sendmmsg cost
  // nearly twice that (8 B ping-pong on lo, raw sockets: 8.6 against 14-16
  // us a round trip).  The receiver takes the ACK first (Nic::poll_rx).
  const bool ack = wire::is_acknowledge(h.bth.opcode);
  const bool join = gso_max_ > 1 && !train_closed_ && train_len_ < gso_max_ && udp_len <= train_seg_ &&
                    train_bytes_ + udp_len <= 65000 && pkts_[train_first_].dst == dst && pkts_[train_first_].tos == tos;
  // The body may be application memory that went away since it was
  // registered: the packet is then not added (nothing changed).  A short
  // one is copied into the slot first, one guarded copy cheaper than a
  // guarded checksum or probe; the packet then carries that copy (whose
  // ICRC cannot be changed under it by the application either).
  bool ours = body.empty() || body.data() == s.bounce.get();  // (a gathered body: scratch())
  if (!ours && body.size() <= kCopiedBody) {
    if (!fault_guard::copy(s.bounce.get(), body.data(), body.size(), body.data())) return false;
    body = std::span<const uint8_t>(s.bounce.get(), body.size());
    ours = true;
  }
  std::memset(s.tail, 0, pad);
  const net::PendingIcrc* pending = nullptr;
  if (defer_icrc_) {  // (a same-host peer's ring may take it without)
    if (!ours && !fault_guard::readable(body.data(), body.size())) return false;
    s.icrc.ip = ip;
    if (join) s.icrc.ip.ipv4_id = uint16_t(ip.ipv4_id + train_len_);
    s.icrc.out = s.tail + pad;
    pending = &s.icrc;
  } else {
    wire::IpUdpFields seg_ip = ip;
    if (join) seg_ip.ipv4_id = uint16_t(ip.ipv4_id + train_len_);
    wire::Icrc crc(seg_ip, udp_len, std::span<const uint8_t, 12>(s.head, 12));
    crc.update(std::span<const uint8_t>(s.head + 12, hlen - 12));
    if (body.empty()) {
    } else if (ours) {
      crc.update(body);
    } else if (!fault_guard::run(body.data(), body.size(), [&] { crc.update(body); })) {
      return false;
    }
    crc.update(std::span<const uint8_t>(s.tail, pad));
    wire::put_icrc(crc.value(), s.tail + pad);
  }
  if (join) {
    ++train_len_;
    train_bytes_ += udp_len;
    pkts_[train_first_].gso_segments = train_len_;
    if (udp_len < train_seg_ || ack) train_closed_ = true;  // only the last may be shorter
  } else {
    ++train_;
    train_first_ = n_;
    train_len_ = 1;
    train_bytes_ = train_seg_ = udp_len;
    train_closed_ = gso_max_ < 2 || ack;
  }
  pkts_[n_] = net::TxPacket{dst,    std::span<const uint8_t>(s.head, hlen),
                            body,   std::span<const uint8_t>(s.tail, pad + wire::kIcrcLen),
                            tos,    uint16_t(join ? 0 : 1),
                            pending};
  ++n_;
  return true;
}

void TxBatch::flush(net::PacketIo& io, Counters& c) noexcept {
  if (n_ == 0) return;
  size_t sent = io.send_batch(std::span<const net::TxPacket>(pkts_.data(), n_));
  c.tx_packets += sent;
  c.tx_errors += n_ - sent;
  for (size_t i = 0; i < n_; ++i) c.tx_bytes += pkts_[i].size();
  n_ = 0;
  train_closed_ = true;
}

}  // namespace uroce::transport
