#include "soak.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

namespace uroce::soak {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t kKeyClient = 0xa;  // pattern keys: the client's source, the server's
constexpr uint64_t kKeyServer = 0xb;

uint64_t key(uint64_t role, int qp) { return role << 32 | uint64_t(qp); }

Status fail(int qp, const std::string& what) { return err::io("QP " + std::to_string(qp) + ": " + what); }

const char* kind_name(int k) {
  static const char* names[] = {"WRITE", "READ(back)", "READ", "SEND", "FETCH_AND_ADD", "CMP_AND_SWP", "READ(final)"};
  return names[k];
}

// (The engine links nothing of the core: its own names for the statuses.)
std::string status_name(WcStatus st) {
  static const char* names[] = {"success",        "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR",   "LOC_PROT_ERR",
                                "WR_FLUSH_ERR",   "MW_BIND_ERR", "BAD_RESP_ERR",  "LOC_ACCESS_ERR",   "REM_INV_REQ_ERR",
                                "REM_ACCESS_ERR", "REM_OP_ERR",  "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR"};
  const auto i = size_t(st);
  return i < std::size(names) ? names[i] : "status " + std::to_string(i);
}

}  // namespace

void fill_pattern(uint8_t* p, size_t len, uint64_t seed, uint64_t k) {
  uint64_t s = mix(seed ^ mix(k));
  for (size_t i = 0; i + 8 <= len; i += 8) {
    const uint64_t v = mix(s + i);
    std::memcpy(p + i, &v, 8);
  }
}

uint64_t counter(const CounterList& c, std::string_view name) {
  for (const auto& [n, v] : c)
    if (n == name) return v;
  return 0;
}

// ------------------------------------------------------------------ server

Status Server::setup() {
  UROCE_TRY(side_.create_qps(o_.qps, o_.depth));
  qps_.resize(size_t(o_.qps));
  for (int i = 0; i < o_.qps; ++i) {
    Q& q = qps_[size_t(i)];
    auto src = side_.reg(kSrcBytes);
    auto dst = side_.reg(size_t(o_.depth) * o_.chunk);
    auto atom = side_.reg(4096);
    auto recv = side_.reg(size_t(o_.depth) * o_.chunk);
    for (auto* r : {&src, &dst, &atom, &recv})
      if (!r->ok()) return r->status();
    q.src = *src;
    q.dst = *dst;
    q.atom = *atom;
    q.recv = *recv;
    fill_pattern(q.src.p, kSrcBytes, o_.seed, key(kKeyServer, i));
    q.client_src.resize(kSrcBytes);
    fill_pattern(q.client_src.data(), kSrcBytes, o_.seed, key(kKeyClient, i));
  }
  side_.sync();  // the patterns are written before the NIC reads them
  return {};
}

ServerQp Server::exposed(int i) const {
  const Q& q = qps_[size_t(i)];
  ServerQp s;
  s.qp = side_.info(i);
  s.src_addr = q.src.addr();
  s.src_rkey = q.src.rkey;
  s.dst_addr = q.dst.addr();
  s.dst_rkey = q.dst.rkey;
  s.atom_addr = q.atom.addr();
  s.atom_rkey = q.atom.rkey;
  return s;
}

Status Server::post_recv(int i, uint32_t slot) {
  const Q& q = qps_[size_t(i)];
  Sge sge = q.recv.sge(size_t(slot) * o_.chunk, o_.chunk);
  return side_.post_recv(i, RecvWr{slot, {&sge, 1}});
}

Status Server::connect(int i, const QpInfo& client) {
  UROCE_TRY(side_.connect(i, client, o_.qp));
  for (uint32_t s = 0; s < o_.depth; ++s) UROCE_TRY(post_recv(i, s));
  return {};
}

Status Server::step() {
  Wc wc[32];
  for (int i = 0; i < o_.qps; ++i) {
    Q& q = qps_[size_t(i)];
    auto n = side_.poll(i, wc);
    if (!n.ok()) return fail(i, "server poll: " + n.status().to_string());
    for (size_t k = 0; k < *n; ++k) {
      const Wc& w = wc[k];
      if (w.status != WcStatus::success) return fail(i, "server: receive completed with " + status_name(w.status));
      if (w.opcode != WcOpcode::recv || !(w.wc_flags & wc_flags::kWithImm))
        return fail(i, "server: unexpected completion opcode " + std::to_string(int(w.opcode)));
      const uint64_t off = uint64_t(w.imm_data) * 64;
      if (w.wr_id >= o_.depth || w.byte_len > o_.chunk || off + w.byte_len > kSrcBytes)
        return fail(i, "server: bad receive (wr_id " + std::to_string(w.wr_id) + ", " + std::to_string(w.byte_len) +
                           " bytes at " + std::to_string(off) + ")");
      const uint8_t* got = q.recv.p + w.wr_id * o_.chunk;
      if (std::memcmp(got, q.client_src.data() + off, w.byte_len) != 0) {
        size_t b = 0;
        while (got[b] == q.client_src[off + b]) ++b;
        return fail(i, "server: SEND #" + std::to_string(q.sends) + " differs at byte " + std::to_string(b) + " of " +
                           std::to_string(w.byte_len));
      }
      ++q.sends;
      side_.sync();  // our read of the buffer is ordered before the NIC refills it
      UROCE_TRY(post_recv(i, uint32_t(w.wr_id)));
    }
  }
  return {};
}

uint64_t Server::sends_checked() const {
  uint64_t n = 0;
  for (const Q& q : qps_) n += q.sends;
  return n;
}

// ------------------------------------------------------------------ client

Status Client::setup() {
  UROCE_TRY(side_.create_qps(o_.qps, o_.depth));
  qps_.resize(size_t(o_.qps));
  for (int i = 0; i < o_.qps; ++i) {
    Q& q = qps_[size_t(i)];
    auto src = side_.reg(kSrcBytes);
    auto rdst = side_.reg(size_t(o_.depth) * o_.chunk);
    auto ares = side_.reg(4096);
    for (auto* r : {&src, &rdst, &ares})
      if (!r->ok()) return r->status();
    q.src = *src;
    q.rdst = *rdst;
    q.ares = *ares;
    fill_pattern(q.src.p, kSrcBytes, o_.seed, key(kKeyClient, i));
    q.server_src.resize(kSrcBytes);
    fill_pattern(q.server_src.data(), kSrcBytes, o_.seed, key(kKeyServer, i));
  }
  side_.sync();
  return {};
}

Status Client::connect(int i, const ServerQp& s) {
  qps_[size_t(i)].peer = s;
  return side_.connect(i, s.qp, o_.qp);
}

Status Client::post_next(int i, Q& q) {
  const uint64_t n = q.next_n;
  const uint64_t r = mix(o_.seed * 0x10000 + uint64_t(i) * 0x100000000ull + n);
  const uint32_t half = o_.chunk / 2;
  const uint32_t len = half + uint32_t(r % (half + 1));
  const uint64_t off = ((r >> 20) % ((kSrcBytes - o_.chunk) / 64)) * 64;
  SendWr wr;
  wr.wr_id = n;
  wr.send_flags = send_flags::kSignaled;
  Sge sge;
  Pending p{n, Kind::write, 0, len, nullptr};
  switch (n % 6) {
    case 0:  // WRITE a random piece of our source into the next destination slot
      p.kind = Kind::write;
      p.slot = uint32_t(q.wslot++ % o_.depth);
      sge = q.src.sge(off, len);
      wr.opcode = WrOpcode::rdma_write;
      wr.remote_addr = q.peer.dst_addr + uint64_t(p.slot) * o_.chunk;
      wr.rkey = q.peer.dst_rkey;
      q.last_write_off = off;
      q.last_write_len = len;
      q.last_write_slot = p.slot;
      q.bytes += len;
      ++q.writes;
      break;
    case 1:  // READ it back: the WRITE arrived whole (RC executes them in order)
      p.kind = Kind::readback;
      p.slot = uint32_t(q.rslot++ % o_.depth);
      p.len = q.last_write_len;
      p.expect = q.src.p + q.last_write_off;
      sge = q.rdst.sge(size_t(p.slot) * o_.chunk, p.len);
      wr.opcode = WrOpcode::rdma_read;
      wr.remote_addr = q.peer.dst_addr + uint64_t(q.last_write_slot) * o_.chunk;
      wr.rkey = q.peer.dst_rkey;
      q.bytes += p.len;
      ++q.reads;
      break;
    case 2:  // READ a random piece of the server's pattern
      p.kind = Kind::read;
      p.slot = uint32_t(q.rslot++ % o_.depth);
      p.expect = q.server_src.data() + off;
      sge = q.rdst.sge(size_t(p.slot) * o_.chunk, len);
      wr.opcode = WrOpcode::rdma_read;
      wr.remote_addr = q.peer.src_addr + off;
      wr.rkey = q.peer.src_rkey;
      q.bytes += len;
      ++q.reads;
      break;
    case 3:  // SEND a random piece of our source; the server checks it
      p.kind = Kind::send;
      sge = q.src.sge(off, len);
      wr.opcode = WrOpcode::send_with_imm;
      wr.imm_data = uint32_t(off / 64);
      q.bytes += len;
      ++q.sends;
      break;
    case 4:  // FETCH_AND_ADD word 0: each original value must come back once
      p.kind = Kind::faa;
      p.slot = uint32_t(q.aslot++ % o_.depth);
      p.len = 8;
      sge = q.ares.sge(size_t(p.slot) * 8, 8);
      wr.opcode = WrOpcode::atomic_fetch_and_add;
      wr.remote_addr = q.peer.atom_addr;
      wr.rkey = q.peer.atom_rkey;
      wr.compare_add = 1;
      ++q.faas;
      break;
    default:  // COMPARE_SWAP word 1 from k to k + 1: applied once, in order
      p.kind = Kind::cas;
      p.slot = uint32_t(q.aslot++ % o_.depth);
      p.len = 8;
      sge = q.ares.sge(size_t(p.slot) * 8, 8);
      wr.opcode = WrOpcode::atomic_cmp_and_swp;
      wr.remote_addr = q.peer.atom_addr + 8;
      wr.rkey = q.peer.atom_rkey;
      wr.compare_add = q.cas_next;
      wr.swap = q.cas_next + 1;
      ++q.cas_next;
      ++q.cas;
      break;
  }
  wr.sg_list = {&sge, 1};
  UROCE_TRY(side_.post_send(i, wr));
  q.pending.push_back(p);
  ++q.next_n;
  return {};
}

Status Client::complete(int i, Q& q, const Wc& wc) {
  if (q.pending.empty()) return fail(i, "completion with nothing outstanding");
  const Pending p = q.pending.front();
  q.pending.pop_front();
  const std::string what = std::string(kind_name(int(p.kind))) + " #" + std::to_string(p.n);
  if (wc.wr_id != p.n) return fail(i, what + ": completion for wr_id " + std::to_string(wc.wr_id) + " (out of order)");
  if (wc.status != WcStatus::success) return fail(i, what + " completed with " + status_name(wc.status));
  switch (p.kind) {
    case Kind::readback:
    case Kind::read: {
      const uint8_t* got = q.rdst.p + size_t(p.slot) * o_.chunk;
      if (wc.byte_len != p.len)
        return fail(i, what + ": byte_len " + std::to_string(wc.byte_len) + ", want " + std::to_string(p.len));
      if (std::memcmp(got, p.expect, p.len) != 0) {
        size_t b = 0;
        while (got[b] == p.expect[b]) ++b;
        return fail(i, what + ": byte " + std::to_string(b) + " of " + std::to_string(p.len) + " differs" +
                           (p.kind == Kind::readback ? " (the WRITE before it did not land whole)" : ""));
      }
      break;
    }
    case Kind::faa: {
      uint64_t v;
      std::memcpy(&v, q.ares.p + size_t(p.slot) * 8, 8);
      q.faa_seen.push_back(v);
      break;
    }
    case Kind::cas: {
      uint64_t v;
      std::memcpy(&v, q.ares.p + size_t(p.slot) * 8, 8);
      // The k-th CAS (k from 0) must find k: each earlier one applied exactly once.
      const uint64_t k = (p.n - 5) / 6;
      if (v != k) return fail(i, what + ": found " + std::to_string(v) + ", want " + std::to_string(k));
      break;
    }
    case Kind::final_read: {
      uint64_t words[2];
      std::memcpy(words, q.rdst.p, 16);
      if (words[0] != q.faas) {
        std::string seen;
        for (uint64_t v : q.faa_seen) seen += " " + std::to_string(v);
        return fail(i, "FETCH_AND_ADD word is " + std::to_string(words[0]) + " after " + std::to_string(q.faas) +
                           " FETCH_AND_ADDs (CAS word " + std::to_string(words[1]) + " after " + std::to_string(q.cas) +
                           "); they returned" + seen);
      }
      if (words[1] != q.cas)
        return fail(
            i, "CMP_AND_SWP word is " + std::to_string(words[1]) + " after " + std::to_string(q.cas) + " CMP_AND_SWPs");
      std::vector<uint64_t> seen = q.faa_seen;
      std::sort(seen.begin(), seen.end());
      for (uint64_t k = 0; k < seen.size(); ++k)
        if (seen[k] != k)
          return fail(i, "FETCH_AND_ADD returned " + std::to_string(seen[k]) + " where " + std::to_string(k) +
                             " was due (an add applied twice, or lost)");
      q.done = true;
      break;
    }
    default: break;
  }
  return {};
}

Result<bool> Client::step() {
  Wc wc[32];
  bool all_done = true;
  for (int i = 0; i < o_.qps; ++i) {
    Q& q = qps_[size_t(i)];
    if (q.done) continue;
    all_done = false;
    // Whole cycles only: a READ-back follows every WRITE.
    auto more = [&] { return !q.final_posted && (q.bytes < o_.bytes_per_qp || q.next_n % 6 != 0); };
    while (more() && q.pending.size() < o_.depth) UROCE_TRY(post_next(i, q));
    if (!more() && q.pending.empty() && !q.final_posted) {  // read both atomic words
      Sge sge = q.rdst.sge(0, 16);
      SendWr wr;
      wr.wr_id = q.next_n;
      wr.opcode = WrOpcode::rdma_read;
      wr.send_flags = send_flags::kSignaled;
      wr.sg_list = {&sge, 1};
      wr.remote_addr = q.peer.atom_addr;
      wr.rkey = q.peer.atom_rkey;
      UROCE_TRY(side_.post_send(i, wr));
      q.pending.push_back(Pending{q.next_n++, Kind::final_read, 0, 16, nullptr});
      q.final_posted = true;
    }
    auto n = side_.poll(i, wc);
    if (!n.ok()) return fail(i, "poll: " + n.status().to_string());
    for (size_t k = 0; k < *n; ++k) UROCE_TRY(complete(i, q, wc[k]));
  }
  return all_done;
}

Totals Client::totals() const {
  Totals t;
  for (const Q& q : qps_) {
    t.bytes += q.bytes;
    t.writes += q.writes;
    t.reads += q.reads;
    t.sends += q.sends;
    t.faas += q.faas;
    t.cas += q.cas;
  }
  return t;
}

std::string Client::progress() const {
  std::string s;
  for (size_t i = 0; i < qps_.size(); ++i) {
    const Q& q = qps_[i];
    char b[200];
    std::snprintf(b, sizeof b, "%sQP %zu: %" PRIu64 " of %" PRIu64 " bytes, %zu in flight%s%s", s.empty() ? "" : "; ",
                  i, q.bytes, o_.bytes_per_qp, q.pending.size(),
                  q.pending.empty() ? "" : (std::string(", oldest ") + kind_name(int(q.pending.front().kind))).c_str(),
                  q.done ? " (done)" : "");
    s += b;
  }
  return s;
}

// ---------------------------------------------------------------- in-process

std::string Report::summary() const {
  char b[1024];
  const double mib = double(totals.bytes) / (1 << 20);
  auto c = [&](const char* n) { return counter(client_counters, n) + counter(server_counters, n); };
  std::snprintf(b, sizeof b,
                "%s: %.1f MiB in %.2f s (%.1f MiB/s): %" PRIu64 " WRITEs, %" PRIu64 " READs, %" PRIu64
                " SENDs (%" PRIu64 " checked), %" PRIu64 " FETCH_AND_ADDs, %" PRIu64
                " CMP_AND_SWPs; injected drops %" PRIu64 ", dups %" PRIu64 ", reorders %" PRIu64 ", delays %" PRIu64
                ", corruptions %" PRIu64 "; retransmits %" PRIu64 ", timeouts %" PRIu64 ", seq NAKs %" PRIu64
                ", duplicates %" PRIu64 ", dup atomics %" PRIu64 ", ICRC drops %" PRIu64 ", kernel drops %" PRIu64,
                ok ? "ok" : "FAILED", mib, seconds, seconds > 0 ? mib / seconds : 0.0, totals.writes, totals.reads,
                totals.sends, sends_checked, totals.faas, totals.cas, c("fault_tx_dropped") + c("fault_rx_dropped"),
                c("fault_tx_duplicated") + c("fault_rx_duplicated"), c("fault_tx_reordered") + c("fault_rx_reordered"),
                c("fault_tx_delayed") + c("fault_rx_delayed"), c("fault_tx_corrupted") + c("fault_rx_corrupted"),
                c("req_retransmits"), c("req_timeouts"), c("resp_seq_naks_sent"), c("resp_duplicates"),
                c("resp_dup_atomics"), c("rx_icrc_bad"), c("rx_kernel_drops"));
  std::string s = b;
  char g[96];
  std::snprintf(g, sizeof g, "; longest pause of the driving thread %.1f ms", max_step_gap_ms);
  s += g;
  if (!ok) s += "\n  error: " + error;
  return s;
}

Report run_in_process(Side& client_side, Side& server_side, const Options& o) {
  Report rep;
  Server server(server_side, o);
  Client client(client_side, o);
  auto finish = [&](Status s) {
    rep.ok = s.ok();
    if (!s.ok()) rep.error = s.to_string();
    rep.totals = client.totals();
    rep.sends_checked = server.sends_checked();
    rep.client_counters = client_side.counters();
    rep.server_counters = server_side.counters();
    return rep;
  };
  if (Status s = server.setup(); !s.ok()) return finish(s);
  if (Status s = client.setup(); !s.ok()) return finish(s);
  for (int i = 0; i < o.qps; ++i) {
    if (Status s = server.connect(i, client.info(i)); !s.ok()) return finish(s);
    if (Status s = client.connect(i, server.exposed(i)); !s.ok()) return finish(s);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + o.time_limit;
  Status st;
  auto last = t0;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    rep.max_step_gap_ms = std::max(rep.max_step_gap_ms, std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
    auto done = client.step();
    if (!done.ok()) {
      st = done.status();
      break;
    }
    if (Status s = server.step(); !s.ok()) {
      st = s;
      break;
    }
    if (*done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      st = err::from_errno(ETIMEDOUT,
                           "no end after " + std::to_string(o.time_limit.count()) + " ms: " + client.progress());
      break;
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    // Every SEND was checked by the server (its receives completed before
    // the client saw the ACKs that completed its SENDs... or right after).
    const auto t_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (server.sends_checked() < client.totals().sends && std::chrono::steady_clock::now() < t_end) {
      if (Status s = server.step(); !s.ok()) {
        st = s;
        break;
      }
    }
    if (st.ok())
      for (int i = 0; i < o.qps; ++i)
        if (server.sends_checked(i) != client.sends(i))
          st = fail(i, "the server checked " + std::to_string(server.sends_checked(i)) + " SENDs of " +
                           std::to_string(client.sends(i)));
  }
  return finish(st);
}

}  // namespace uroce::soak
