// fp4serve: one binary, one subcommand per job.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "core/check.h"
#include "tools/fp4serve/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"fp4serve: an inference engine for MiniMax-M3-family models with an NVFP4 KV "
               "cache and NVFP4 experts"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fp4serve 0.1.0");
  int exit_code = 0;
  fp4::cli::add_serve_command(app, exit_code);
  fp4::cli::add_generate_command(app, exit_code);
  fp4::cli::add_plan_command(app, exit_code);
  fp4::cli::add_convert_command(app, exit_code);
  fp4::cli::add_bench_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fp4::Error& e) {
    fmt::print(stderr, "fp4serve: error: {}\n", e.what());
    return 1;
  }
  return exit_code;
}
