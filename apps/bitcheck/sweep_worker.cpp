// `bitcheck __sweep-worker` (hidden): the worker process of an isolated sweep, running the cases
// sent over a socket (see lib/sweep/isolation.h).
#include <memory>

#include "commands.h"
#include "sweep/isolation.h"

namespace bitcheck::cli {

void add_sweep_worker_command(CLI::App& app, Context& context) {
  auto fd = std::make_shared<int>(-1);
  auto* command =
      app.add_subcommand("__sweep-worker", "Run sweep cases sent over a socket")->group("");
  command->add_option("--fd", *fd, "Socket to the sweep process")->required();
  // The sweep passes on the plugins and Python impls it loaded (external_impl_arguments).
  auto external = std::make_shared<ExternalImpls>();
  add_external_impl_options(*command, *external);
  context.on(
      command, [fd](const Registry& registry) { return run_sweep_worker(registry, *fd); },
      [external] { return *external; });
}

}  // namespace bitcheck::cli
