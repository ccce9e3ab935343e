// Benchmarks behind `fp4serve bench`: each returns rows of one table. GPU rows carry the
// fraction of the copy bandwidth measured in the same run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4::bench {

struct Row {
  std::string device;     // "cpu" or the GPU's name
  std::string kernel;     // e.g. "nvfp4 quantize bf16->fp4"
  std::string shape;      // e.g. "32768x16384"
  double bytes = 0;       // bytes the kernel must move (inputs read once, outputs written once)
  double ms = 0;          // median time
  double gbps() const { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0; }
  double ceiling_gbps = 0;  // copy bandwidth measured in the same run, 0 if none
  bool validated = false;   // output checked against the CPU reference in this run
};

struct Options {
  int64_t gpu_tensor_bytes = int64_t{1} << 30;  // size of the float-side tensor on the GPU
  int64_t cpu_tensor_bytes = int64_t{64} << 20;
  int reps = 20;
  bool gpu = true;
  // Sections to run (kBenchSections); empty runs them all.
  std::vector<std::string> only;
  bool runs(const std::string& section) const {
    return only.empty() || std::find(only.begin(), only.end(), section) != only.end();
  }
  // Decode batch sizes to run in the sections that sweep them (kBatchSweeps); empty runs each
  // section's every size. A profiler or a quick comparison then times one shape, not the table.
  std::vector<int64_t> batches;
  bool runs_batch(int64_t batch) const {
    return batches.empty() || std::find(batches.begin(), batches.end(), batch) != batches.end();
  }
  // The sparse decode attention's split count, forced (0: the split plan's own choice), so that
  // the plan's cost model can be checked against the counts it did not pick.
  int attention_splits = 0;
  // With the model section: also each op of a layer timed one by one (NVFP4 caches, 64K).
  bool profile_ops = false;
};

// The sections that sweep decode batch sizes, and their sizes: --batch picks among them.
struct BatchSweep {
  std::string section;
  std::vector<int64_t> batches;
};
inline const std::vector<BatchSweep> kBatchSweeps = {{"attention", {1, 8, 32, 128}},
                                                    {"indexer", {1, 8, 32, 128}},
                                                    {"experts", {1, 16, 64, 256}},
                                                    {"model", {1, 16, 64}}};
inline const std::vector<int64_t>& batch_sweep(const std::string& section) {
  for (const BatchSweep& s : kBatchSweeps) {
    if (s.section == section) return s.batches;
  }
  static const std::vector<int64_t> none;
  return none;
}

// Why the options ask for something the selected sections do not run ("" when they are fine):
// a --batch size that no selected section sweeps, --batch with no selected section that sweeps
// sizes, or --attention-splits without the attention section.
std::string check_options(const Options& options);

// The sections of `fp4serve bench`, for --only: the CPU codecs, then the GPU's.
inline const std::vector<std::string> kBenchSections = {"cpu",     "quantize",      "attention", "prefill", "indexer",
                                                        "page-read", "pre-attention", "experts", "projections", "model"};

std::vector<Row> run_cpu_benchmarks(const Options& options);
// Empty when this build has no CUDA backend or the machine has no GPU; `why` says which.
std::vector<Row> run_gpu_benchmarks(const Options& options, std::string& why);

}  // namespace fp4::bench
