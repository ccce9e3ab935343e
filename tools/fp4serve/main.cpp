// fp4serve: one binary, one subcommand per job.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "core/check.h"
#include "tools/fp4serve/commands.h"

namespace {
constexpr int kBadInputExit = 2;
}  // namespace

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
  fp4::cli::add_init_model_command(app, exit_code);
  // Exit status: 0 success; 2 bad input (a flag CLI11 rejects, or an fp4::Error: every check
  // of user input throws one, naming the field and the numbers);
  // 1 anything unexpected.
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kBadInputExit;
  } catch (const fp4::Error& e) {
    fmt::print(stderr, "fp4serve: error: {}\n", e.what());
    return kBadInputExit;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fp4serve: internal error: {}\n", e.what());
    return 1;
  }
  return exit_code;
}
