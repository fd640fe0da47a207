// A device on a FakeNetwork for the verbs tests: no socket needed to own a PD.
#pragma once

#include <memory>

#include "net/fake_io.hpp"
#include "verbs/context.hpp"

namespace uroce::verbs {

inline Result<std::unique_ptr<Context>> open_fake_context() {
  DeviceConfig cfg;
  cfg.name = "mr-test";
  cfg.gids.push_back(*IpAddr::parse("10.7.7.7"));
  auto net = net::FakeNetwork::create();
  cfg.io_factory = [net]() -> Result<std::unique_ptr<net::PacketIo>> {
    auto io = net->attach({*IpAddr::parse("10.7.7.7"), 0});
    if (!io.ok()) return io.status();
    return std::unique_ptr<net::PacketIo>(std::move(*io));
  };
  return Context::open(cfg);
}

}  // namespace uroce::verbs
