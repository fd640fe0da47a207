// `uroce version`: what this build is.
#include "uroce/version.hpp"

#include <cstdio>

#include "commands.hpp"

namespace uroce::cli {

Command add_version(CLI::App& root) {
  Command c;
  c.app = root.add_subcommand("version", "Print the version of uroce");
  c.run = [] {
    std::printf("uroce %s (RoCEv2 over UDP port 4791)\n", uroce::version());
    return 0;
  };
  return c;
}

}  // namespace uroce::cli
