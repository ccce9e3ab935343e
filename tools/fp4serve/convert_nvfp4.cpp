#include "tools/fp4serve/convert_nvfp4.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <cstring>

#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/nvfp4.h"
#include "model/checkpoint.h"
#include "model/progress.h"
#include "model/safetensors_writer.h"
#include "tools/fp4serve/convert_quant_config.h"
#include "tools/fp4serve/convert_shard_writer.h"
#include "tools/fp4serve/convert_weight.h"

namespace fp4::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

enum class Action { kCopy, kNvfp4, kMxfp8, kBf16 };

// One step of the stream: a source weight re-quantized (its scales consumed with it) or one
// tensor copied. All its outputs go to the same shard.
struct Job {
  Action action = Action::kCopy;
  ConvertClass cls = ConvertClass::kOther;
  std::string name;
  std::string from;              // source format of a converted weight
  std::vector<int64_t> logical;  // logical shape of a converted weight
  std::vector<ShardEntry> outputs;
  int64_t before = 0;            // source bytes (weight, scales)
  int64_t after() const {
    int64_t n = 0;
    for (const ShardEntry& e : outputs) n += e.bytes;
    return n;
  }
};

constexpr const char* kCompanionSuffixes[] = {".weight_scale_inv", ".weight_scale_2",
                                              ".weight_scale", ".input_scale"};

ConvertClass classify(const std::string& name) {
  static const std::regex expert(R"(block_sparse_moe\.experts\.\d+\.w[123]\.weight$)");
  static const std::regex attention(R"(self_attn\.(q|k|v|o|index_q|index_k)_proj\.weight$)");
  if (std::regex_search(name, expert)) return ConvertClass::kRoutedExperts;
  if (std::regex_search(name, attention)) return ConvertClass::kAttention;
  return ConvertClass::kOther;
}

std::string module_of(const std::string& weight) {
  return weight.substr(0, weight.size() - std::string_view(".weight").size());
}

// The converted tensors of one weight, under ModelOpt's (NVFP4) or MiniMax's (MXFP8) names.
std::vector<ShardEntry> planned_outputs(Action action, const std::string& name,
                                        const std::vector<int64_t>& logical) {
  const std::string m = module_of(name);
  const int64_t elems = [&] {
    int64_t n = 1;
    for (int64_t d : logical) n *= d;
    return n;
  }();
  auto with_last = [&](int64_t last) {
    std::vector<int64_t> s = logical;
    s.back() = last;
    return s;
  };
  const int64_t cols = logical.back();
  switch (action) {
    case Action::kNvfp4:
      return {{name, "U8", with_last(cols / 2), elems / 2},
              {m + ".weight_scale", "F8_E4M3", with_last(cols / kNvfp4BlockElems), elems / kNvfp4BlockElems},
              {m + ".weight_scale_2", "F32", {}, 4},
              {m + ".input_scale", "F32", {}, 4}};
    case Action::kMxfp8:
      return {{name, "F8_E4M3", logical, elems}, {m + ".weight_scale_inv", "U8", with_last(cols / 32), elems / 32}};
    case Action::kBf16:
      return {{name, "BF16", logical, elems * 2}};
    case Action::kCopy:
      break;
  }
  fail_internal("planned_outputs of a copied tensor {}", name);
}

struct Plan {
  std::vector<Job> jobs;
  std::vector<std::vector<size_t>> shards;  // job indices per shard
  std::map<std::string, std::string> module_formats;  // Linear module -> output format
};

bool is_linear(const model::TensorRef& t) {
  const std::string& n = t.name;
  return n.ends_with(".weight") && t.shape.size() >= 2 && n.find("norm") == std::string::npos &&
         n.find("embed_tokens") == std::string::npos;
}

Plan make_plan(const model::Checkpoint& ck, const Nvfp4ConvertOptions& o) {
  Plan plan;
  std::set<std::string> consumed;
  std::map<std::string, size_t> job_of_module;
  for (std::string_view sv : ck.names()) {
    const std::string name(sv);
    const ConvertClass cls = classify(name);
    Action action = Action::kCopy;
    if (cls == ConvertClass::kRoutedExperts) action = Action::kNvfp4;
    if (cls == ConvertClass::kAttention && o.attention == AttentionMode::kMxfp8) action = Action::kMxfp8;
    if (cls == ConvertClass::kAttention && o.attention == AttentionMode::kBf16) action = Action::kBf16;
    if (action == Action::kCopy) continue;
    const model::TensorRef& t = ck.get(name);
    Job job{action, cls, name, std::string(ck.describe(name)), t.shape, {}, 0};
    FP4_CHECK(!t.shape.empty(), "{}: tensor {} has shape [], expected a matrix", o.in, name);
    if (job.from == "nvfp4") job.logical.back() *= 2;
    const int64_t block = action == Action::kNvfp4 ? kNvfp4BlockElems : action == Action::kMxfp8 ? 32 : 1;
    FP4_CHECK(job.logical.back() % block == 0, "{}: tensor {} has {} input features (shape {}), "
              "expected a multiple of the {}-value block to convert it to {}", o.in, name,
              job.logical.back(), model::shape_string(t.shape), block, action == Action::kNvfp4 ? "NVFP4" : "MXFP8");
    job.outputs = planned_outputs(action, name, job.logical);
    job.before = t.bytes.size();
    const std::string m = module_of(name);
    for (const char* suffix : kCompanionSuffixes) {
      if (const model::TensorRef* c = ck.find(m + suffix)) {
        consumed.insert(c->name);
        job.before += c->bytes.size();
      }
    }
    consumed.insert(name);
    plan.module_formats[m] = action == Action::kNvfp4 ? "nvfp4" : action == Action::kMxfp8 ? "mxfp8" : "bf16";
    plan.jobs.push_back(std::move(job));
  }
  FP4_CHECK(std::any_of(plan.jobs.begin(), plan.jobs.end(),
                        [](const Job& j) { return j.cls == ConvertClass::kRoutedExperts; }),
            "{}: no routed expert weights (tensors named ...block_sparse_moe.experts.<e>.w1/w2/w3"
            ".weight); --experts nvfp4 needs a mixture-of-experts checkpoint", o.in);
  for (std::string_view sv : ck.names()) {
    const std::string name(sv);
    if (consumed.count(name)) continue;
    const model::TensorRef& t = ck.get(name);
    // A companion keeps its weight's class, so the report's bytes per class include scales.
    ConvertClass cls = classify(name);
    for (const char* suffix : kCompanionSuffixes) {
      if (name.ends_with(suffix)) {
        const std::string w = name.substr(0, name.size() - std::strlen(suffix)) + ".weight";
        if (ck.find(w)) cls = classify(w);
      }
    }
    plan.jobs.push_back({Action::kCopy, cls, name, "", {}, {{name, t.dtype, t.shape, static_cast<int64_t>(t.bytes.size())}},
                         static_cast<int64_t>(t.bytes.size())});
    if (is_linear(t)) {
      std::string format = "stored";
      try {
        format = std::string(ck.describe(name));
      } catch (const Error&) {
      }
      plan.module_formats[module_of(name)] = format;
    }
  }
  std::sort(plan.jobs.begin(), plan.jobs.end(), [](const Job& a, const Job& b) { return a.name < b.name; });
  int64_t in_shard = 0;
  for (size_t i = 0; i < plan.jobs.size(); ++i) {
    const int64_t bytes = plan.jobs[i].after();
    if (plan.shards.empty() || (in_shard > 0 && in_shard + bytes > o.max_shard_bytes)) {
      plan.shards.emplace_back();
      in_shard = 0;
    }
    plan.shards.back().push_back(i);
    in_shard += bytes;
  }
  return plan;
}

std::span<const uint8_t> as_bytes(const auto& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0])};
}

// Converts one weight, appends its outputs and returns the relative error.
double convert_weight(const model::Checkpoint& ck, const Job& job, ShardWriter& writer) {
  const std::vector<float> w = ck.load_f32(job.name, job.logical);
  const WeightTarget target = job.action == Action::kNvfp4   ? WeightTarget::kNvfp4
                              : job.action == Action::kMxfp8 ? WeightTarget::kMxfp8
                                                             : WeightTarget::kBf16;
  const QuantizedWeight q = quantize_weight(w, job.logical.back(), target, job.name);
  writer.append(q.values);
  if (target != WeightTarget::kBf16) writer.append(q.scales);
  if (target == WeightTarget::kNvfp4) {
    const float input_scale = 1.0f;  // no activation calibration: the identity
    writer.append(as_bytes(std::vector<float>{q.global_scale}));
    writer.append(as_bytes(std::vector<float>{input_scale}));
  }
  return q.rel_rms;
}

std::string shard_name(size_t i, size_t n) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

bool is_checkpoint_file(const std::string& f) {
  return f.ends_with(".safetensors") || f.ends_with(".tmp") || f == "model.safetensors.index.json" ||
         f == "config.json" || f == "hf_quant_config.json";
}

// Files beside the weights this large are not "small files" (a stray .bin or .pt copy of the
// weights): they are left behind, and the report says so.
constexpr int64_t kMaxCopiedFileBytes = int64_t{256} << 20;

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  FP4_CHECK(f.good(), "cannot read {}", path.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Removes what a failed run created, so it leaves no partial output behind.
struct Cleanup {
  fs::path dir;
  bool created_dir = false;
  std::vector<fs::path> files;
  bool done = false;
  ~Cleanup() {
    if (done) return;
    std::error_code ec;
    for (const fs::path& f : files) fs::remove(f, ec);
    if (created_dir) fs::remove(dir, ec);  // only if empty
  }
};

}  // namespace

AttentionMode parse_attention_mode(std::string_view text) {
  if (text == "keep") return AttentionMode::kKeep;
  if (text == "mxfp8") return AttentionMode::kMxfp8;
  if (text == "bf16") return AttentionMode::kBf16;
  fail("--attention {}: expected keep, mxfp8 or bf16", text);
}

std::string_view convert_class_name(ConvertClass cls) {
  switch (cls) {
    case ConvertClass::kRoutedExperts: return "routed experts";
    case ConvertClass::kAttention: return "attention";
    case ConvertClass::kOther: return "other";
  }
  return "?";
}

Nvfp4ConvertReport convert_experts_to_nvfp4(const Nvfp4ConvertOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  FP4_CHECK(o.max_shard_bytes > 0, "--max-shard-bytes {}: expected a positive size", o.max_shard_bytes);
  if (o.threads > 0) set_default_num_threads(o.threads);
  std::error_code ec;
  FP4_CHECK(!fs::exists(o.out, ec) || !fs::equivalent(o.in, o.out, ec),
            "--out {} is the --in directory; expected a different one", o.out);
  // Everything read and checked before --out is touched, so bad input creates nothing.
  const fs::path in(o.in);
  FP4_CHECK(fs::is_regular_file(in / "config.json", ec), "{}: no config.json; expected a Hugging "
            "Face checkpoint directory", o.in);
  ordered_json config = ordered_json::parse(read_file(in / "config.json"), nullptr, false);
  FP4_CHECK(config.is_object(), "{}: not a JSON object", (in / "config.json").string());
  model::CheckpointOptions copts;
  copts.progress = model::ProgressMode::kNever;
  copts.num_threads = o.threads;
  const model::Checkpoint ck(o.in, copts);
  const Plan plan = make_plan(ck, o);
  const QuantConfig quant = make_quant_config(plan.module_formats);

  Nvfp4ConvertReport report;
  report.in = o.in;
  report.out = o.out;
  report.shards = static_cast<int>(plan.shards.size());
  int64_t total_before = 0;
  for (const Job& j : plan.jobs) total_before += j.before;

  Cleanup cleanup;
  cleanup.dir = o.out;
  if (!fs::exists(o.out, ec)) {
    fs::create_directories(o.out, ec);
    FP4_CHECK(!ec, "cannot create --out {}: {}", o.out, ec.message());
    cleanup.created_dir = true;
  } else {
    FP4_CHECK(fs::is_directory(o.out, ec), "--out {} exists and is not a directory", o.out);
    FP4_CHECK(fs::is_empty(o.out, ec) || o.force, "--out {} exists and is not empty; expected a "
              "new or empty directory (--force writes over files of the same names)", o.out);
  }
  const fs::path out(o.out);
  std::unique_ptr<model::ProgressBar> bar;
  if (o.progress && model::progress_enabled(model::ProgressMode::kAuto, total_before, stderr)) {
    bar = std::make_unique<model::ProgressBar>("fp4serve convert", total_before, stderr);
  }
  ordered_json weight_map = ordered_json::object();
  int64_t total_size = 0;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const std::string file = shard_name(s, plan.shards.size());
    std::vector<ShardEntry> entries;
    for (size_t j : plan.shards[s]) {
      for (const ShardEntry& e : plan.jobs[j].outputs) {
        entries.push_back(e);
        weight_map[e.name] = file;
        total_size += e.bytes;
      }
    }
    ShardWriter writer((out / file).string(), std::move(entries));
    for (size_t j : plan.shards[s]) {
      const Job& job = plan.jobs[j];
      const int c = static_cast<int>(job.cls);
      report.bytes_before[c] += job.before;
      report.bytes_after[c] += job.after();
      if (job.action == Action::kCopy) {
        writer.append(ck.get(job.name).bytes);
        ++report.tensors_copied;
      } else {
        const char* to = job.action == Action::kNvfp4 ? "nvfp4" : job.action == Action::kMxfp8 ? "mxfp8" : "bf16";
        report.converted.push_back({job.name, job.from, to, convert_weight(ck, job, writer)});
      }
      if (bar) bar->advance(job.before);
    }
    cleanup.files.push_back(out / file);
    writer.commit();
  }
  if (bar) bar->finish();
  for (const fs::directory_entry& e : fs::directory_iterator(in)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file() || is_checkpoint_file(f)) continue;
    if (static_cast<int64_t>(e.file_size()) > kMaxCopiedFileBytes) {
      fmt::print(stderr, "fp4serve convert: not copying {} ({} bytes): not a small file\n", e.path().string(), e.file_size());
      continue;
    }
    cleanup.files.push_back(out / f);
    model::write_text_file_atomically((out / f).string(), read_file(e.path()));
  }
  ordered_json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  config["quantization_config"] = quant.config_block;
  // Last, and in this order: loaders start from config.json (and the index), so a run stopped
  // earlier never leaves a directory that looks like a whole model.
  for (const auto& [file, json] : {std::pair<const char*, const ordered_json*>{"hf_quant_config.json", &quant.hf_quant_config},
                                   {"model.safetensors.index.json", &index},
                                   {"config.json", &config}}) {
    cleanup.files.push_back(out / file);
    model::write_text_file_atomically((out / file).string(), json->dump(2) + "\n");
  }
  cleanup.done = true;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace fp4::convert
