// Each subcommand of the fp4serve binary lives in its own file and registers itself on the
// top-level CLI11 app. A subcommand's callback stores the process exit status in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace fp4::cli {

void add_serve_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_convert_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_init_model_command(CLI::App& app, int& exit_code);

}  // namespace fp4::cli
