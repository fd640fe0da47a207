// The subcommands of `uroce`: each file adds one to the root app and says
// how to run it once parsed.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace uroce::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // the exit status
};

Command add_version(CLI::App& root);
Command add_stat(CLI::App& root);
Command add_demo(CLI::App& root);
Command add_pingpong(CLI::App& root);
Command add_perf(CLI::App& root);
Command add_baseline(CLI::App& root);
Command add_exec(CLI::App& root);
Command add_pubsub(CLI::App& root);
Command add_scale(CLI::App& root);

}  // namespace uroce::cli
