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

// Exit status of a subcommand that exists in the command line but whose work is not built yet.
constexpr int kNotImplementedExit = 2;

// Registers a subcommand that says it is not implemented yet and exits with status 2.
CLI::App* add_pending_command(CLI::App& app, int& exit_code, const std::string& name,
                              const std::string& description, const std::string& pending_note);

}  // namespace fp4::cli
