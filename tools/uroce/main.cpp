// uroce: the command-line tool of the software RDMA NIC.
#include <cstdio>
#include <vector>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"uroce: a software RDMA NIC in user space speaking RoCEv2 over UDP"};
  app.require_subcommand(1);
  std::vector<uroce::cli::Command> commands = {
      uroce::cli::add_demo(app),     uroce::cli::add_pingpong(app), uroce::cli::add_perf(app),
      uroce::cli::add_baseline(app), uroce::cli::add_stat(app),     uroce::cli::add_exec(app),
      uroce::cli::add_pubsub(app),   uroce::cli::add_scale(app),    uroce::cli::add_version(app),
  };
  CLI11_PARSE(app, argc, argv);
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run();
  std::fputs("uroce: no command given (try --help)\n", stderr);
  return 2;
}
