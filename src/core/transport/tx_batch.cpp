#include "transport/tx_batch.hpp"

#include <cstring>

#include "transport/counters.hpp"
#include "wire/packet.hpp"

namespace uroce::transport {

TxBatch::TxBatch() {
  for (auto& s : slots_) s.bounce = std::make_unique<uint8_t[]>(kBounce);
}

void TxBatch::add(const Endpoint& dst, const wire::IpUdpFields& ip, wire::Headers& h,
                  std::span<const uint8_t> body, uint8_t tos) noexcept {
  Slot& s = slots_[n_];
  const uint8_t pad = wire::pad_for(body.size());
  h.bth.pad = pad;
  const size_t hlen = wire::encode_headers(h, s.head);
  const size_t udp_len = hlen + body.size() + pad + wire::kIcrcLen;
  wire::Icrc crc(ip, udp_len, std::span<const uint8_t, 12>(s.head, 12));
  crc.update(std::span<const uint8_t>(s.head + 12, hlen - 12));
  crc.update(body);
  std::memset(s.tail, 0, pad);
  crc.update(std::span<const uint8_t>(s.tail, pad));
  wire::put_icrc(crc.value(), s.tail + pad);
  pkts_[n_] = net::TxPacket{dst, std::span<const uint8_t>(s.head, hlen), body,
                            std::span<const uint8_t>(s.tail, pad + wire::kIcrcLen), tos};
  ++n_;
}

void TxBatch::flush(net::PacketIo& io, Counters& c) noexcept {
  if (n_ == 0) return;
  size_t sent = io.send_batch(std::span<const net::TxPacket>(pkts_.data(), n_));
  c.tx_packets += sent;
  c.tx_errors += n_ - sent;
  for (size_t i = 0; i < n_; ++i) c.tx_bytes += pkts_[i].size();
  n_ = 0;
}

}  // namespace uroce::transport
