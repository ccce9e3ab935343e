// `fp4serve bench`: runs the kernel benchmarks that this build and machine support and prints
// one table. Each GPU kernel is validated against the CPU reference in the same run on at least
// one of its configurations (the "validated" column), and every GPU row is shown as a fraction
// of the device-to-device copy bandwidth measured in that run.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "core/check.h"
#include "tools/fp4serve/bench.h"
#include "tools/fp4serve/bench_capacity.h"
#include "tools/fp4serve/bench_serve.h"
#include "tools/fp4serve/commands.h"

namespace fp4::cli {
namespace {

void print_table(const std::vector<bench::Row>& rows) {
  fmt::print("{:<22} {:<34} {:>13} {:>10} {:>9} {:>9} {:>8} {:>6}\n", "device", "kernel", "shape",
             "MB moved", "ms", "GB/s", "% copy", "valid");
  for (const auto& r : rows) {
    const std::string pct = r.ceiling_gbps > 0 ? fmt::format("{:.1f}", 100.0 * r.gbps() / r.ceiling_gbps) : "-";
    fmt::print("{:<22} {:<34} {:>13} {:>10.1f} {:>9.4f} {:>9.1f} {:>8} {:>6}\n", r.device, r.kernel,
               r.shape, r.bytes / 1e6, r.ms, r.gbps(), pct, r.validated ? "yes" : "-");
  }
}

void write_json(const std::vector<bench::Row>& rows, const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"device", r.device}, {"kernel", r.kernel}, {"shape", r.shape},
                   {"bytes", r.bytes}, {"ms", r.ms}, {"gbps", r.gbps()},
                   {"copy_gbps", r.ceiling_gbps}, {"validated", r.validated}});
  }
  std::ofstream file(path);
  FP4_CHECK(file.good(), "cannot write {}", path);
  file << out.dump(2) << "\n";
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<bench::Options>();
  auto json_path = std::make_shared<std::string>();
  auto cpu_only = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "bench", "Benchmark the kernels this build supports (CPU always, CUDA when present)");
  // Ranges keep every buffer allocatable: up to 16 GiB on the GPU (four buffers of this size
  // are live at once), 4 GiB on the host.
  sub->add_option("--gpu-bytes", options->gpu_tensor_bytes,
                  "Bytes of the float-side tensor in GPU benchmarks")
      ->capture_default_str()->check(CLI::Range(int64_t{1} << 20, int64_t{16} << 30));
  sub->add_option("--cpu-bytes", options->cpu_tensor_bytes,
                  "Bytes of the float-side tensor in CPU benchmarks")
      ->capture_default_str()->check(CLI::Range(int64_t{1} << 16, int64_t{4} << 30));
  sub->add_option("--reps", options->reps, "Timed repetitions (the median is reported)")
      ->capture_default_str()->check(CLI::Range(1, 10000));
  sub->add_flag("--cpu-only", *cpu_only, "Skip the GPU benchmarks");
  sub->add_option("--only", options->only, "Run only these sections (repeatable)")
      ->check(CLI::IsMember(bench::kBenchSections));
  std::vector<std::string> sweeps;
  for (const bench::BatchSweep& s : bench::kBatchSweeps) {
    sweeps.push_back(fmt::format("{} {}", s.section, fmt::join(s.batches, ", ")));
  }
  sub->add_option("--batch", options->batches,
                  fmt::format("Run only these decode batch sizes in the sections that sweep them (repeatable): {}",
                              fmt::join(sweeps, "; ")))
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--attention-splits", options->attention_splits,
                  "Force the sparse decode attention's split count (0: the split plan's). The launch takes "
                  "the count of equal shares of the 16 selected pages it gives (5 -> 4), and the rows name it")
      ->capture_default_str()->check(CLI::Range(0, 16));
  sub->add_flag("--profile-ops", options->profile_ops,
                "With the model section: also time each op of a layer one by one (NVFP4 caches at 64K, "
                "steps op by op), per layer");
  sub->add_option("--json", *json_path, "Also write the rows to this JSON file");
  CLI::App* serve = add_bench_serve_command(*sub, exit_code);
  CLI::App* capacity = add_bench_capacity_command(*sub, exit_code);
  sub->callback([=, &exit_code] {
    // CLI11 runs this callback after the subcommands' too: the kernels are benchmarked only when
    // no subcommand was given.
    if (serve->parsed() || capacity->parsed()) return;
    if (const std::string why = bench::check_options(*options); !why.empty()) {
      fmt::print(stderr, "fp4serve bench: {}\n", why);
      exit_code = 2;
      return;
    }
    std::vector<bench::Row> rows;
    if (options->runs("cpu")) rows = bench::run_cpu_benchmarks(*options);
    const bool gpu_sections = std::any_of(bench::kBenchSections.begin() + 1, bench::kBenchSections.end(),
                                          [&](const std::string& s) { return options->runs(s); });
    if (!*cpu_only && gpu_sections) {
      std::string why;
      auto gpu_rows = bench::run_gpu_benchmarks(*options, why);
      if (gpu_rows.empty()) fmt::print(stderr, "fp4serve bench: GPU benchmarks skipped: {}\n", why);
      rows.insert(rows.end(), gpu_rows.begin(), gpu_rows.end());
    }
    print_table(rows);
    if (!json_path->empty()) write_json(rows, *json_path);
    exit_code = 0;
  });
}

}  // namespace fp4::cli

namespace fp4::bench {

std::string check_options(const Options& options) {
  if (options.attention_splits > 0 && !options.runs("attention")) {
    return "--attention-splits applies to the attention section, which is not selected";
  }
  if (options.profile_ops && !options.runs("model")) {
    return "--profile-ops applies to the model section, which is not selected";
  }
  if (options.batches.empty()) return "";
  std::vector<std::string> swept;  // the selected sections that sweep batch sizes, with their sizes
  std::vector<int64_t> sizes;
  for (const BatchSweep& s : kBatchSweeps) {
    if (!options.runs(s.section)) continue;
    swept.push_back(fmt::format("{} {}", s.section, fmt::join(s.batches, ", ")));
    sizes.insert(sizes.end(), s.batches.begin(), s.batches.end());
  }
  if (swept.empty()) return "--batch applies to the attention, indexer, experts and model sections, and none is selected";
  for (int64_t b : options.batches) {
    if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) {
      return fmt::format("--batch {} is not a batch size of the selected sections ({})", b, fmt::join(swept, "; "));
    }
  }
  return "";
}

}  // namespace fp4::bench
