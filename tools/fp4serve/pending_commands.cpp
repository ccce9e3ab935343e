// Subcommands whose work is not built yet. Each one is part of the command line already, says
// what it will do, and exits with status 2 so that scripts cannot mistake it for success.
#include <fmt/format.h>

#include "tools/fp4serve/commands.h"

namespace fp4::cli {

CLI::App* add_pending_command(CLI::App& app, int& exit_code, const std::string& name,
                              const std::string& description, const std::string& pending_note) {
  CLI::App* sub = app.add_subcommand(name, description);
  sub->allow_extras();
  sub->callback([&exit_code, name, pending_note] {
    fmt::print(stderr, "fp4serve {}: not implemented yet. {}\n", name, pending_note);
    exit_code = kNotImplementedExit;
  });
  return sub;
}

void add_serve_command(CLI::App& app, int& exit_code) {
  add_pending_command(app, exit_code, "serve",
                      "Serve a model over the OpenAI-compatible HTTP API",
                      "It needs the model runtime and the continuous-batching engine.");
}

}  // namespace fp4::cli
