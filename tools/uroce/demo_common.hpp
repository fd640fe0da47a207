// What the two sides of `uroce demo` share: the options, the layout of the
// registered buffer, the little text protocol over the socket pair they
// talk through, and the printing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "uroce/uroce.hpp"

namespace uroce::demo {

struct Options {
  std::string addr = "127.0.0.1";
  uint64_t size = 4096;
  uint32_t mtu = 1024;
  int peer_fd = -1;  // set: run as the passive side, talking over this fd
};

// Both sides register one buffer laid out alike:
//   [0, size)        SEND: the active's source, the passive's receive buffer
//   [size, 2 size)   RDMA WRITE: the active's source, the passive's target
//   [2 size, 3 size) RDMA READ: the passive's source, the active's target
//   [3 size, 4 size) active: where the WRITE is read back
//   4 size           8-byte counter (passive) / FETCH_AND_ADD result (active)
struct Layout {
  explicit Layout(uint64_t s) : size(s) {}
  uint64_t size;
  uint64_t send() const { return 0; }
  uint64_t write() const { return size; }
  uint64_t read() const { return 2 * size; }
  uint64_t back() const { return 3 * size; }
  uint64_t counter() const { return (4 * size + 7) / 8 * 8; }
  uint64_t total() const { return counter() + 64; }
};

// A page-aligned, zeroed buffer.
struct Buffer {
  explicit Buffer(size_t n);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data = nullptr;
  size_t size = 0;
  std::span<std::byte> span(uint64_t off, uint64_t len) const { return {data + off, size_t(len)}; }
};

// Fills `out` with `text` repeated.
void fill_text(std::span<std::byte> out, std::string_view text);
// FNV-1a, 64 bits: a fingerprint to compare buffers across processes.
uint64_t fnv1a(std::span<const std::byte> b);
// The first bytes as quoted text ("Hello..."), non-printables escaped.
std::string preview(std::span<const std::byte> b, size_t max = 44);

// One message: a verb and key=value pairs ("hello qpn=0x4002 psn=...").
struct Msg {
  std::string verb;
  std::map<std::string, std::string> kv;
  std::string str(const std::string& key) const;
  uint64_t num(const std::string& key) const;  // decimal or 0x hex; 0 if absent
};

// A line-oriented message link over a stream socket.
class Link {
 public:
  explicit Link(int fd) : fd_(fd) {}
  Status send(const std::string& verb, const std::map<std::string, std::string>& kv = {});
  // Waits at most timeout_ms: ETIMEDOUT, or EPIPE when the other side is gone.
  Result<Msg> recv(int timeout_ms = 15000);
  // Receives a message and checks its verb (EPROTO otherwise).
  Result<Msg> expect(const std::string& verb, int timeout_ms = 15000);

 private:
  int fd_;
  std::string in_;
};

std::string hex(uint64_t v, int digits = 0);

// Lines of one side: "   active  | ..." (flushed at once: the two
// processes share the terminal and take turns).
void say(const char* who, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// An empty line.
void blank();
// A line of the narration (no side).
void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "status success, opcode SEND, byte_len 4096"
std::string describe(const Wc& wc);

PeerInfo peer_from(const Msg& m);
std::map<std::string, std::string> to_kv(const PeerInfo& p);

int run_active(const Options& o);
int run_passive(const Options& o);

}  // namespace uroce::demo
