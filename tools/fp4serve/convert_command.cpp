// `fp4serve convert`: checkpoint conversion, one mode per source. Built: --from-llama2c, a
// llama2.c checkpoint and tokenizer to a Hugging Face Llama directory (docs/convert.md); the
// reading and mapping are in llama2c.cpp; --in DIR --out DIR --experts nvfp4, a checkpoint's
// routed experts re-quantized to ModelOpt NVFP4 (convert_nvfp4.cpp).
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "core/check.h"
#include "model/safetensors_writer.h"
#include "tools/fp4serve/commands.h"
#include "tools/fp4serve/convert_nvfp4.h"
#include "tools/fp4serve/llama2c.h"

namespace fp4::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

struct ConvertFlags {
  std::string from_llama2c, tokenizer, out;
  bool force = false;
  std::string in, experts, attention = "keep", report_json, model;
  int threads = 0;
  int64_t max_shard_bytes = 5'000'000'000;
  bool dry_run = false;
};

// An existing non-empty directory is refused unless --force, so a typo in --out cannot
// overwrite another model's files.
void prepare_output_dir(const std::string& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    FP4_CHECK(fs::is_directory(dir, ec), "--out {} exists and is not a directory", dir);
    const bool empty = fs::is_empty(dir, ec);
    FP4_CHECK(!ec, "cannot list --out {}: {}", dir, ec.message());
    FP4_CHECK(empty || force, "--out {} exists and is not empty; expected a new or empty "
              "directory (--force writes over files of the same names)", dir);
    return;
  }
  fs::create_directories(dir, ec);
  FP4_CHECK(!ec, "cannot create --out {}: {}", dir, ec.message());
}

void write_json(const fs::path& path, const ordered_json& json) {
  model::write_text_file_atomically(path.string(), json.dump(2) + "\n");
}

void run_from_llama2c(const ConvertFlags& flags) {
  FP4_CHECK(!flags.tokenizer.empty(), "--from-llama2c needs --tokenizer TOK.bin, llama2.c's "
            "tokenizer file for the checkpoint");
  FP4_CHECK(!flags.out.empty(), "--from-llama2c needs --out DIR");
  // Both inputs are read and checked before --out is touched, so bad input leaves nothing.
  convert::Llama2cCheckpoint checkpoint = convert::read_llama2c_checkpoint(flags.from_llama2c);
  const convert::Llama2cConfig config = checkpoint.config;
  const convert::Llama2cTokenizer tokenizer =
      convert::read_llama2c_tokenizer(flags.tokenizer, config.vocab_size);
  const ordered_json tokenizer_json = convert::hf_tokenizer_json(tokenizer);
  const convert::HfWeights weights = convert::hf_llama_weights(std::move(checkpoint));

  prepare_output_dir(flags.out, flags.force);
  const fs::path dir(flags.out);
  std::vector<model::SafetensorsWriteTensor> tensors;
  int64_t params = 0;
  for (const convert::HfTensor& t : weights.tensors) {
    const std::span<const float> v = weights.values(t);
    tensors.push_back({t.name, "F32", t.shape,
                       {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()}});
    params += t.count;
  }
  model::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_json(dir / "tokenizer.json", tokenizer_json);
  write_json(dir / "tokenizer_config.json", convert::hf_tokenizer_config(config));
  write_json(dir / "generation_config.json", convert::hf_generation_config());
  // Last: loaders start from config.json, so a run stopped earlier does not leave a directory
  // that looks like a whole model.
  write_json(dir / "config.json", convert::hf_llama_config(config));
  fmt::print("fp4serve convert: {} -> {}: LlamaForCausalLM, {} layers, {} tensors, {} F32 "
             "parameters, {}-token vocabulary with {} merges\n", flags.from_llama2c, flags.out,
             config.n_layers, tensors.size(), params, config.vocab_size,
             tokenizer_json["model"]["merges"].size());
}

void run_nvfp4(const ConvertFlags& flags) {
  FP4_CHECK(flags.experts == "nvfp4", "--experts {}: expected nvfp4 (the only format routed "
            "experts are converted to)", flags.experts);
  const convert::AttentionMode attention = convert::parse_attention_mode(flags.attention);
  if (flags.dry_run) {
    FP4_CHECK(!flags.model.empty() || !flags.in.empty(), "--dry-run needs --model PRESET (or --in DIR)");
    fmt::print("{}", convert::format_nvfp4_dry_run(flags.model.empty() ? flags.in : flags.model));
    return;
  }
  FP4_CHECK(!flags.in.empty() && !flags.out.empty(), "--experts nvfp4 needs --in DIR and --out DIR");
  convert::Nvfp4ConvertOptions options;
  options.in = flags.in;
  options.out = flags.out;
  options.attention = attention;
  options.threads = flags.threads;
  options.max_shard_bytes = flags.max_shard_bytes;
  options.force = flags.force;
  const convert::Nvfp4ConvertReport report = convert::convert_experts_to_nvfp4(options);
  fmt::print("{}", convert::format_convert_report(report));
  if (!flags.report_json.empty()) {
    model::write_text_file_atomically(flags.report_json, convert::convert_report_json(report).dump(2) + "\n");
  }
}

}  // namespace

void add_convert_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ConvertFlags>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a checkpoint: a llama2.c model to a Hugging Face Llama directory "
                 "(--from-llama2c); a checkpoint's routed experts to NVFP4 (--in --out --experts nvfp4)");
  sub->add_option("--from-llama2c", flags->from_llama2c,
                  "llama2.c checkpoint (legacy version-0 .bin) to convert");
  sub->add_option("--tokenizer", flags->tokenizer, "llama2.c tokenizer (.bin) of that checkpoint");
  sub->add_option("--out", flags->out, "Output directory, new or empty");
  sub->add_flag("--force", flags->force,
                "Write into a non-empty --out, replacing files of the same names");
  sub->add_option("--in", flags->in, "Hugging Face checkpoint directory (BF16 or MXFP8) to convert");
  sub->add_option("--experts", flags->experts, "Format of the routed experts: nvfp4");
  sub->add_option("--attention", flags->attention,
                  "Attention and index projections: keep (copied, default), mxfp8 or bf16");
  sub->add_option("--threads", flags->threads, "Quantization threads (default: all cores)");
  sub->add_option("--max-shard-bytes", flags->max_shard_bytes,
                  "Tensor bytes per output shard, at most (default 5000000000)");
  sub->add_option("--report-json", flags->report_json, "Also write the report as JSON to FILE");
  sub->add_flag("--dry-run", flags->dry_run,
                "Print the sizes before and after from the size model; read and write nothing");
  sub->add_option("--model", flags->model, "With --dry-run: a preset (minimax-m3, ...)");
  sub->callback([flags, &exit_code] {
    if (!flags->from_llama2c.empty()) {
      run_from_llama2c(*flags);
      exit_code = 0;
      return;
    }
    FP4_CHECK(!flags->experts.empty(), "fp4serve convert needs --from-llama2c FILE or "
              "--in DIR --out DIR --experts nvfp4 (or --dry-run --model PRESET --experts nvfp4)");
    run_nvfp4(*flags);
    exit_code = 0;
  });
}

}  // namespace fp4::cli
