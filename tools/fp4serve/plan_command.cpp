#include "tools/fp4serve/commands.h"

namespace fp4::cli {

void add_plan_command(CLI::App& app, int& exit_code) {
  add_pending_command(app, exit_code, "plan", "Plan KV-cache capacity for a deployment",
                      "It needs the model configuration and the cache sizing model.");
}

}  // namespace fp4::cli
