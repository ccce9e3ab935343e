#include <memory>

#include "tools/fp4serve/bench_serve.h"
#include "tools/fp4serve/bench_serve_options.h"
#include "tools/fp4serve/bench_serve_run.h"

namespace fp4::cli {

CLI::App* add_bench_serve_command(CLI::App& bench, int& exit_code) {
  auto options = std::make_shared<bench_serve::ServeOptions>();
  CLI::App* sub = bench.add_subcommand(
      "serve", "Load-test an OpenAI-compatible server and report TTFT, TPOT, ITL, E2EL and "
               "throughput as `vllm bench serve` does");
  bench_serve::add_serve_flags(*sub, *options);
  sub->callback([options, &exit_code] { exit_code = bench_serve::run_bench_serve(*options); });
  return sub;
}

}  // namespace fp4::cli
