// `fp4serve bench serve`: a load generator for an OpenAI-compatible server that measures as
// `vllm bench serve` does (docs/bench_serve.md).
#pragma once

#include <CLI/CLI.hpp>

namespace fp4::cli {

// Registers `serve` under the `bench` subcommand. Its callback stores the exit status in
// `exit_code`.
CLI::App* add_bench_serve_command(CLI::App& bench, int& exit_code);

}  // namespace fp4::cli
