// PortGroup: one UDP port (ADDR:4791) shared by the uroce processes of one
// user on one address, as a NIC is shared by the processes of a host, so
// that every one of them is reachable from any peer (issue 18).
//
// The group is an SO_REUSEPORT group of kPositions sockets, bound once, in
// order, by the process that founds it; the kernel admits only sockets of
// the same effective uid to a group, so another user can neither join nor
// steal.  Every member process holds a copy of all kPositions sockets, so
// that a socket leaves the group only when the last process holding it is
// gone, and the index of each socket in the group (what the steering
// program returns) never changes while the group lives.  Each member owns
// one position and receives on that socket only; the steering program
// (steering.hpp) sends each datagram to the position of the process its
// destination belongs to.
//
// Positions are claimed in a table next to the host registry
// (<registry>.ports, same trust rules), under an exclusive flock of that
// file, which also serialises founding, joining, leaving and every change
// of the steering program.  Founders of other registries on the address
// (the kernel would merge their sockets into our group) are kept out by a
// founding lock of the address common to all registries (found()).  An entry counts while its registry slot is held
// by the process that claimed it (HostRegistry::holds): the position of a
// process that died (SIGKILL included) is free for the next one, which
// empties its socket of what was queued for the dead process first.  A
// process that dies leaves the program steering to its position until a
// member steers again: each member rebuilds the program from the table
// once a second (kResteerPeriod), so the default position and the rdma_cm
// listeners of a dead process move within a second, and a program built
// from a wrong view (a live member taken for dead) heals as fast.
//
// A member leaves under the table's lock and frees its position only once
// it holds none of the sockets; a newcomer that finds members on their way
// out (a program that opens and closes the device while probing it, as UCX
// does, or one killed but not yet reaped) lets go of the lock and tries
// again for up to kJoinPatience before it settles for a port of its own.
// The re-steer never waits for the lock: the newcomer holding it may be
// waiting for that very thread.
//
// A newcomer gets the sockets from a live member over a Unix socket in the
// abstract namespace of our network namespace, named after the uid, the
// address, the port and the member's slot; both ends check that the other
// runs under our uid (SO_PEERCRED).  Each member serves on a thread of its
// own (uroce-port, blocking in accept, none of the application's signals).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/ip_addr.hpp"
#include "common/status.hpp"
#include "net/steering.hpp"
#include "net/unique_fd.hpp"

namespace uroce::net {

class HostRegistry;
class ListenerTable;

namespace ports {
struct File;
}

class PortGroup {
 public:
  static constexpr uint32_t kPositions = 32;
  static constexpr std::chrono::milliseconds kResteerPeriod{1000};
  // How long join() waits for a member that is leaving or dying to be gone.
  static constexpr std::chrono::milliseconds kJoinPatience{5000};

  // Sets the options every socket of the group has (called by the founder
  // for each, before bind).
  using Configure = std::function<Status(int fd)>;

  // Joins the group on `at` in our network namespace for the process
  // holding `reg`'s slot, founding it if no live process has one.
  // EADDRINUSE if the port is held outside a group of ours; ENOSPC if every
  // position is taken.
  static Result<std::unique_ptr<PortGroup>> join(std::shared_ptr<HostRegistry> reg, const Endpoint& at,
                                                 const Configure& configure);
  // Leaves: frees the position, steers without us, stops serving.
  ~PortGroup();
  PortGroup(const PortGroup&) = delete;
  PortGroup& operator=(const PortGroup&) = delete;

  // Our position and a descriptor of its socket (owned by the group).
  uint32_t position() const noexcept { return position_; }
  int fd() const noexcept { return socks_[position_].get(); }
  const Endpoint& endpoint() const noexcept { return at_; }

  // Rebuilds the group's steering program from the live members and the
  // rdma_cm listeners of the address (the host's listener table).
  Status steer();
  // steer() for every group of this process: after a change of the listener
  // table (rdma_cm listen or its end).
  static void steer_all() noexcept;

  // After fork(), in the child (one thread): closes every descriptor the
  // parent's groups hold, touching neither the groups nor their objects.
  static void after_fork_in_child() noexcept;

 private:
  PortGroup() = default;
  static Result<std::unique_ptr<PortGroup>> join_locked(std::shared_ptr<HostRegistry> reg, const Endpoint& at,
                                                        const Configure& configure);
  Status lock() noexcept;
  void unlock() noexcept;
  Status found(const Configure& configure);
  Status fetch();
  Status claim();
  Status steer_locked();
  void resteer() noexcept;  // the uroce-port thread's, once a period
  Status start_serving();
  void serve_loop() noexcept;
  bool live(uint32_t i) const noexcept;

  std::shared_ptr<HostRegistry> reg_;
  Endpoint at_;
  uint64_t netns_ = 0;
  std::string path_;
  UniqueFd file_fd_;
  ports::File* file_ = nullptr;
  uint32_t group_ = 0;  // index of our group in the file
  uint32_t position_ = 0;
  bool claimed_ = false;  // position_ is ours (not so in a join that failed)
  std::vector<UniqueFd> socks_;
  UniqueFd listen_fd_;
  std::thread server_;
  std::unique_ptr<ListenerTable> listeners_;  // opened on first use
  // Keeps two threads of ours from steering at once (the file's flock does
  // not: it is one open file description).
  std::mutex steer_mu_;
};

}  // namespace uroce::net
