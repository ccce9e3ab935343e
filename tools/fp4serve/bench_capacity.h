// `fp4serve bench capacity`: the number of max-length sequences the serving engine runs at once
// on this GPU against the number `fp4serve plan` predicts (bench_capacity.cpp says how).
#pragma once

#include <CLI/CLI.hpp>

namespace fp4::cli {

// Registers `capacity` under the `bench` subcommand; its callback stores the exit status (0 when
// the engine's count and the plan's are within one sequence) in `exit_code`.
CLI::App* add_bench_capacity_command(CLI::App& bench, int& exit_code);

}  // namespace fp4::cli
