// `fp4serve init-model`: writes a random model of the built-in model's architecture
// (init_model.h). The build runs it to put random-model/ beside the executable
// (default_model.h), which is also where it writes when --out is not given.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "tools/fp4serve/commands.h"
#include "tools/fp4serve/default_model.h"
#include "tools/fp4serve/init_model.h"

namespace fp4::cli {

void add_init_model_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<init_model::InitModelOptions>();
  CLI::App* sub = app.add_subcommand(
      "init-model", "Write a small model of the MiniMax-M3.1-Flash architecture with random "
                    "weights from a seed (the built-in model's shape; its output is noise)");
  sub->add_option("--out", options->out,
                  "Output directory, new or empty (default: random-model beside this executable)");
  sub->add_option("--preset", options->preset,
                  fmt::format("Architecture: {}", fmt::join(init_model::preset_names(), ", ")))
      ->capture_default_str();
  // CLI11 would read "-1" into the unsigned seed as 2^64 - 1; a minus sign is a mistake instead.
  sub->add_option("--seed", options->seed, "Seed of the random weights (0 to 2^64 - 1)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_flag("--force", options->force,
                "Write into a non-empty --out, replacing files of the same names");
  sub->callback([options, &exit_code] {
    init_model::InitModelOptions o = *options;
    if (o.out.empty()) o.out = random_model_location().string();
    const init_model::InitModelReport r = init_model::write_random_model(o);
    fmt::print("fp4serve init-model: {} with random weights (seed {}) -> {}: {} parameters in {} "
               "tensors, model.safetensors {} bytes\n", o.preset, o.seed, r.out, r.parameters,
               r.tensors, r.safetensors_bytes);
    exit_code = 0;
  });
}

}  // namespace fp4::cli
