// ShmRing: the inbound packet ring of one NIC in a shared-memory file, a
// multi-producer single-consumer queue of fixed-size slots (see ShmIo).
//
// File: <dir>/uroce-<uid>-<netns>-<addr>-<port>.ring, mode 0600, created by
// the NIC that receives on (addr, port) and removed when it closes.  A
// 4 KiB header (owner pid and start time, slot geometry, the sleep flag and
// the doorbell latch, the consumer's counters), then `slots` slots of
// kSlotHeader + payload_max bytes.
//
// Each slot has one 64-bit state word: lap (40 bits) | state (2) | pid (22).
// Slot i serves the positions p = lap * slots + i.  States:
//   FREE(lap)          free for the position of that lap
//   WRITING(lap, pid)  reserved by a producer of process pid, being written
//   READY(lap)         published, to be consumed
//   SKIPPED(lap, pid)  the consumer gave up waiting for the producer
// A producer reserves the slot at the ring's tail with a compare-and-swap
// FREE(lap) -> WRITING(lap, pid), then moves the tail on (any producer that
// finds the tail's slot taken helps it along), copies the packet and
// publishes with a compare-and-swap WRITING -> READY.  A slot that still
// holds an older lap means the ring is full.  No lock: producers of several
// threads and processes never wait for each other.
//
// The consumer takes READY slots in order and frees them (FREE(lap + 1))
// when the caller is done with the data (at the next take()).  A slot that
// stays WRITING is skipped and counted: after stall_dead if its producer's
// process is gone (the slot is freed at once), after stall_max in any case
// (SKIPPED: the late producer's publish fails, it reports the packet lost
// and frees the slot itself; if it never comes, the consumer frees the slot
// when it meets it again a lap later and another stall_max has passed).
//
// Sleep and wake-up: a consumer about to sleep in its socket increments
// `sleepers` and then looks at its next slot (prepare_sleep); a producer
// publishes and then reads `sleepers` (both sequentially consistent, so one
// of them sees the other).  If someone sleeps, the first producer to flip
// the `bell` latch sends a doorbell datagram to the consumer's socket.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/packet_io.hpp"

namespace uroce::net {

namespace shm {

inline constexpr uint64_t kMagic = 0x31474e4952524d55ull;  // "UMRRING1"
inline constexpr uint32_t kVersion = 2;                    // 2: bells on Unix sockets (shm_bell.hpp)
inline constexpr size_t kHeaderSize = 4096;
inline constexpr size_t kSlotHeader = 64;
// 8.6 MiB a ring.  512 slots (2.1 MiB) moved the same RC bandwidth, but
// lost UD datagrams in bursts that a UDP socket's 4 MiB buffer holds
// (udaddy: 10 QPs x 100 sends of 1000 bytes, 10 lost).  Where the file
// system has no room for it, ShmIo asks for a quarter, then a sixteenth.
inline constexpr uint32_t kDefaultSlots = 2048;
inline constexpr size_t kDefaultPayload = 4096 + 64;  // = kDefaultMaxPayload of UdpIo

struct alignas(64) Header {
  std::atomic<uint64_t> magic;  // stored last (release) at creation
  uint32_t version;
  uint32_t slots;      // a power of two
  uint32_t slot_size;  // kSlotHeader + payload_max, a multiple of 64
  uint32_t payload_max;
  int32_t owner_pid;
  uint32_t reserved0;
  uint64_t owner_start;                          // /proc/<pid>/stat start time
  std::atomic<uint32_t> closed;                  // the owner is gone (closed cleanly)
  alignas(64) std::atomic<uint64_t> tail;        // next position to reserve (producers)
  alignas(64) std::atomic<uint32_t> sleepers;    // consumer threads asleep in the socket
  std::atomic<uint32_t> bell;                    // a doorbell was sent since the last sleep
  alignas(64) std::atomic<uint64_t> rx_packets;  // consumer's counters
  std::atomic<uint64_t> rx_bytes;
  std::atomic<uint64_t> skipped;
  // Words for the ring's user, zero at creation (an XRC SRQ's inbox keeps
  // its receive credits and its domain here: transport/xrc_share.hpp).
  alignas(64) std::atomic<uint64_t> user[8];
};
static_assert(sizeof(Header) <= kHeaderSize);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

struct alignas(64) SlotHead {
  std::atomic<uint64_t> word;
  uint8_t src[16];
  uint8_t dst[16];
  uint16_t src_port;
  uint16_t len;
  uint16_t ipv4_id_hint;
  uint8_t tos;
  uint8_t ttl;
  uint8_t flags;  // kSlot* bits (the consumer clears them as it frees the slot: an older producer writes none)
};
static_assert(sizeof(SlotHead) == kSlotHeader);
// The producer left the packet's ICRC out (net::kRingTakesNoIcrc).
inline constexpr uint8_t kSlotNoIcrc = 1;
// The slot holds several packets (net::kRingTakesPacked): records, each a
// header of kRecordHeader bytes (the packet's length and its IPv4 ID hint,
// little-endian 16-bit words) and then the packet; len covers them all.
inline constexpr uint8_t kSlotPacked = 2;
inline constexpr size_t kRecordHeader = 4;
inline constexpr size_t kMaxPacked = 16;  // records a slot, at most

enum class State : uint32_t { free = 0, writing = 1, ready = 2, skipped = 3 };
constexpr uint64_t kPidBits = 22;
constexpr uint64_t kPidMask = (1ull << kPidBits) - 1;
constexpr uint64_t word(uint64_t lap, State s, uint64_t pid = 0) {
  return lap << 24 | uint64_t(s) << kPidBits | (pid & kPidMask);
}
constexpr uint64_t lap_of(uint64_t w) { return w >> 24; }
constexpr State state_of(uint64_t w) { return State((w >> kPidBits) & 3); }
constexpr pid_t pid_of(uint64_t w) { return pid_t(w & kPidMask); }

}  // namespace shm

// Where ring files live: $UROCE_SHM_DIR if set and non-empty, else
// runtime_dir() (an error if that is not ours alone).
Result<std::string> shm_dir();
// The ring file of the NIC receiving on `ep` in our network namespace; of
// the one with registry slot `slot` among those that share `ep`'s port
// (net/port_group.hpp), if slot >= 0.
std::string shm_ring_path(const std::string& dir, const Endpoint& ep, int slot = -1);

// What a producer writes besides the packet.
struct ShmMeta {
  Endpoint src;
  IpAddr dst;
  uint8_t tos = 0, ttl = 64;
  uint16_t ipv4_id_hint = 0;
  bool icrc_omitted = false;  // the last 4 bytes are not an ICRC
};

class ShmRing {
 public:
  using Clock = std::chrono::steady_clock;

  struct CreateOptions {
    uint32_t slots = shm::kDefaultSlots;  // rounded up to a power of two, 2..65536
    size_t payload_max = shm::kDefaultPayload;
    std::chrono::milliseconds stall_dead{10};   // skip a dead producer's slot after this
    std::chrono::milliseconds stall_max{1000};  // skip any unpublished slot after this
    // The header's user words as the ring appears (producers never see them
    // unset).
    std::array<uint64_t, 8> user{};
    // Never replace a file of that name: EEXIST if there is one (the caller
    // removed the dead owners' files first).
    bool exclusive = false;
  };
  // The consumer: creates the ring at `path` (replacing a file of that name,
  // which can only be a dead NIC's: the caller holds the UDP port).
  static Result<std::unique_ptr<ShmRing>> create(const std::string& path, const CreateOptions& opt);
  // A producer: maps an existing ring.  ENOENT if there is none, ESTALE if
  // its owner is dead or gone, EINVAL if it is not a valid ring, EACCES if
  // it is not ours alone.
  static Result<std::unique_ptr<ShmRing>> attach(const std::string& path);
  // Removes ring files of dead owners in `dir` (ours: uroce-<uid>-*.ring);
  // returns how many.
  static size_t clean_stale(const std::string& dir);
  // Rings created by this process are shared with its own producers rather
  // than mapped a second time (the same memory at two addresses would hide
  // the producer/consumer ordering from ThreadSanitizer, and costs memory).
  // publish_local() makes an owner's ring findable by local(path) until
  // close().
  static void publish_local(const std::shared_ptr<ShmRing>& ring);
  static std::shared_ptr<ShmRing> local(const std::string& path);
  // The owner's goodbye: marks the ring closed (producers stop using it),
  // removes its file and its local publication.  The destructor does it too.
  void close() noexcept;

  ~ShmRing();
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  const std::string& path() const noexcept { return path_; }
  bool owner() const noexcept { return owner_; }
  uint32_t slots() const noexcept { return slots_; }
  size_t payload_max() const noexcept { return payload_max_; }
  uint64_t inode() const noexcept { return ino_; }
  shm::Header& header() const noexcept { return *hdr_; }

  // ---- producers (any thread, any process) ----
  enum class Put { ok, full, lost, too_big };
  // Copies head | body | tail into the next slot and publishes it.  full:
  // nothing free (nothing written); lost: the consumer skipped our slot
  // while we were writing (only after a stall of stall_max); too_big: more
  // than payload_max() bytes (nothing written).
  Put put(const ShmMeta& m, std::span<const uint8_t> head, std::span<const uint8_t> body,
          std::span<const uint8_t> tail) noexcept;
  // One packet of a packed slot, and its IPv4 ID hint.
  struct Part {
    std::span<const uint8_t> head, body, tail;
    uint16_t ipv4_id_hint = 0;
    size_t size() const noexcept { return head.size() + body.size() + tail.size(); }
  };
  // Copies `parts` (2 .. kMaxPacked of them) into the next slot as records
  // (shm::kSlotPacked), taken in that order; m.ipv4_id_hint is unused.
  // too_big: more than payload_max() bytes with the records' headers, or
  // too many parts (nothing written).  A consumer that does not advertise
  // net::kRingTakesPacked must not be sent these.
  Put put_packed(const ShmMeta& m, std::span<const Part> parts) noexcept;
  // The two halves of put(), public so that tests can die in between.
  // begin returns the reserved position, or UINT64_MAX when full.
  uint64_t put_begin() noexcept;
  shm::SlotHead& slot_at(uint64_t pos) const noexcept {  // (inline: every poll calls it)
    return *reinterpret_cast<shm::SlotHead*>(slots_base_ + size_t(pos & (slots_ - 1)) * slot_size_);
  }
  uint8_t* payload_at(uint64_t pos) const noexcept {
    return reinterpret_cast<uint8_t*>(&slot_at(pos)) + shm::kSlotHeader;
  }
  Put put_commit(uint64_t pos) noexcept;
  // After publishing: true if the consumer sleeps and nobody rang since it
  // fell asleep (the caller then sends the doorbell).
  bool need_doorbell() noexcept;
  // The owner closed the ring, or is dead (the latter costs a few syscalls).
  bool closed() const noexcept { return hdr_->closed.load(std::memory_order_acquire) != 0; }
  bool owner_alive() const noexcept;

  // ---- the consumer (one thread at a time) ----
  // Frees the slots handed out by the last take(), then hands out up to
  // out.size() packets in order; their data stays valid until the next take().
  size_t take(std::span<RxPacket> out) noexcept;
  // The bell was read by a thread that may not be the one it was rung for
  // (the consumer's threads share it): clears the latch, so that the next
  // publish rings again for a thread still asleep.  The caller then looks
  // (waiting(), sequentially consistent) for what was published before,
  // which may have rung no bell.  Any thread.
  void rearm_bell() noexcept;
  // Before sleeping in the socket: announces the sleep; true if a slot is
  // already waiting (then do not sleep).  Thread-safe against take().
  bool prepare_sleep() noexcept;
  void end_sleep() noexcept;
  // A slot waits to be taken (or skipped).  Any thread.
  bool waiting() const noexcept;
  uint64_t skipped() const noexcept { return skipped_; }
  uint64_t rx_packets() const noexcept { return rx_packets_; }

 private:
  ShmRing() = default;
  Status map(int fd, size_t size, bool populate);

  std::string path_;
  bool owner_ = false;
  bool closed_ = false;  // close() done
  void* map_ = nullptr;
  size_t size_ = 0;
  uint64_t ino_ = 0, dev_ = 0;
  shm::Header* hdr_ = nullptr;
  uint8_t* slots_base_ = nullptr;
  void write_meta(shm::SlotHead& s, const ShmMeta& m, uint8_t flags) noexcept;
  // The packets of the packed slot at `h` from byte `packed_off_` of its
  // payload, into out[n..]: false if out filled before its last record (the
  // slot stays at the head, and the next take() goes on from there).
  bool take_packed(shm::SlotHead& s, std::span<RxPacket> out, size_t& n) noexcept;

  uint32_t slots_ = 0, shift_ = 0;
  size_t slot_size_ = 0, payload_max_ = 0;
  pid_t pid_ = 0;  // ours, for the WRITING word

  // consumer
  std::atomic<uint64_t> head_{0};  // next position to take (read by prepare_sleep)
  uint64_t held_ = 0;              // positions [head - held, head) handed out
  size_t packed_off_ = 0;          // of the packed slot at head, handed out up to here
  uint64_t stall_pos_ = UINT64_MAX, stall_word_ = 0;
  Clock::time_point stall_since_{};
  Clock::duration stall_dead_{}, stall_max_{};
  uint64_t rx_packets_ = 0, rx_bytes_ = 0, skipped_ = 0;
};

}  // namespace uroce::net
