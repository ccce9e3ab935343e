// `fp4serve serve`: loads a model (the built-in default when --model is not given), sizes the
// KV pool from the memory actually free, starts the engine thread and serves the OpenAI API
// until SIGINT or SIGTERM. Flags are spelled as vLLM spells them.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/check.h"
#include "core/thread_pool.h"
#include "engine/async_engine.h"
#include "engine/kv_pool_plan.h"
#include "server/http_server.h"
#include "server/openai_server.h"
#include "tools/fp4serve/commands.h"
#include "tools/fp4serve/default_model.h"
#include "tools/fp4serve/serve_chat.h"

namespace fp4::cli {
namespace {

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  std::string kv_cache_dtype = "auto";
  std::string index_cache_dtype = "auto";
  std::string index_query_dtype = "fp32";
  std::string attention_operands = "fp32";
  double gpu_memory_utilization = 0.9;
  int64_t kv_cache_memory = 0;
  std::string served_model_name;
  std::string chat_template;
  int threads = 0;
  int64_t max_body_bytes = int64_t{32} << 20;
  bool progress = false;
  std::string mxfp8_weights = "auto";
  std::string device = "auto";
  bool enforce_eager = false;
};

// The built-in models' config.json says how they were made. A random-weights model is announced
// as such, so nobody mistakes its output for a trained model's; the trained default says what
// it can answer, since it knows nothing else.
void announce_init_kind(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded()) return;
  if (config.contains("fp4serve_train") && config["fp4serve_train"].value("kind", "") == "trained") {
    fmt::print(stderr, "fp4serve serve: this model was trained by fp4serve's tools/train on two "
               "tasks only: arithmetic (ask \"317+4085=\") and key-value retrieval (lines "
               "\"key=value\", then \"?key=\"); its MODEL_CARD.md says how well it does them\n");
    return;
  }
  if (!config.contains("fp4serve_init")) return;
  const nlohmann::json& init = config["fp4serve_init"];
  if (init.value("kind", "") == "random") {
    fmt::print(stderr, "fp4serve serve: this model has RANDOM weights (init-model, preset {}, "
               "seed {}): it exercises the engine, and its text is noise\n",
               init.value("preset", "?"), init.value("seed", 0));
  }
}

void run_serve(const ServeFlags& f) {
  // SIGINT and SIGTERM are taken by one thread (sigtimedwait below), so they are blocked before
  // any thread starts: threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  set_default_num_threads(f.threads);
  const std::filesystem::path model_dir = f.model.empty() ? default_model_dir() : std::filesystem::path(f.model);
  if (f.model.empty()) fmt::print(stderr, "fp4serve serve: no --model given: serving {}\n", model_dir.string());
  announce_init_kind(model_dir);
  const engine::LoadedModel model = engine::load_model({.model_dir = model_dir.string(), .progress = f.progress,
                                                       .device = f.device, .mxfp8_weights = f.mxfp8_weights,
                                                       .max_decode_batch = f.max_num_seqs});
  FP4_CHECK(model.tokenizer.has_value(), "{} has no tokenizer.json; the server needs one",
            model_dir.string());
  fmt::print(stderr, "fp4serve serve: loaded {} ({} layers, hidden {}, vocab {}) in {:.2f} s, on {}\n",
             model_dir.string(), model.config.num_layers, model.config.hidden_size,
             model.config.vocab_size, model.load_seconds, model.backend->name());

  engine::EngineConfig config;
  config.cache = engine::cache_formats(f.kv_cache_dtype, f.index_cache_dtype, f.index_query_dtype,
                                       f.attention_operands);
  config.max_model_len = f.max_model_len > 0 ? f.max_model_len : model.config.max_position_embeddings;
  FP4_CHECK(config.max_model_len > 0, "the model's config has no max_position_embeddings; give --max-model-len");
  FP4_CHECK(model.config.max_position_embeddings == 0 || config.max_model_len <= model.config.max_position_embeddings,
            "--max-model-len {} exceeds the model's context of {} tokens", config.max_model_len,
            model.config.max_position_embeddings);
  config.scheduler = {.max_num_seqs = f.max_num_seqs, .max_num_batched_tokens = f.max_num_batched_tokens};
  config.enforce_eager = f.enforce_eager;
  const engine::KvPoolPlan plan = engine::plan_serving_pool(
      model, config.cache,
      {.memory_utilization = f.gpu_memory_utilization, .kv_cache_memory = f.kv_cache_memory,
       .max_model_len = config.max_model_len, .max_num_seqs = f.max_num_seqs,
       .max_num_batched_tokens = f.max_num_batched_tokens});
  config.num_pages = plan.num_pages;
  fmt::print(stderr, "fp4serve serve: KV cache {} / index cache {}\n{}\n",
             kvcache::page_dtype_name(config.cache.kv), kvcache::page_dtype_name(config.cache.index),
             plan.describe(config.max_model_len));

  engine::LlmEngine engine(model, config);
  engine::AsyncEngine async(engine);
  server::ServerConfig sc;
  sc.served_model_name = f.served_model_name.empty() ? model_dir.string() : f.served_model_name;
  sc.model_root = model_dir.string();
  sc.api_key = f.api_key;
  sc.chat = make_chat_renderer(model_dir, f.chat_template, *model.tokenizer);
  sc.created = static_cast<int64_t>(std::time(nullptr));
  if (!sc.chat) fmt::print(stderr, "fp4serve serve: no chat template: /v1/chat/completions will answer 400\n");
  server::OpenAiServer api(async, *model.tokenizer, sc);

  server::HttpServer http({.host = f.host, .port = static_cast<uint16_t>(f.port),
                           .max_body_bytes = static_cast<size_t>(f.max_body_bytes)},
                          [&api](const server::HttpRequest& r, server::HttpResponder& w) { api.handle(r, w); });
  fmt::print(stderr, "fp4serve serve: serving '{}' on http://{}:{}\n", sc.served_model_name, f.host, http.port());
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    const timespec tick{0, 200'000'000};
    while (!done) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        fmt::print(stderr, "fp4serve serve: shutting down\n");
        http.stop();
        return;
      }
    }
  });
  http.run();
  done = true;
  waiter.join();
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* sub = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API");
  sub->add_option("--model", f->model, "Model directory (default: the built-in model)");
  sub->add_option("--host", f->host, "Address to bind")->capture_default_str();
  sub->add_option("--port", f->port, "Port (0: any free one)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", f->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  sub->add_option("--max-model-len", f->max_model_len, "Prompt + output tokens of one request (default: the model's context)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  sub->add_option("--max-num-seqs", f->max_num_seqs, "Requests running at once")->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  sub->add_option("--mxfp8-weights", f->mxfp8_weights,
                  "How a GPU holds projections stored in MXFP8: mxfp8, bf16, or auto (mxfp8 when "
                  "--max-num-seqs is at most 16)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "mxfp8", "bf16"}));
  sub->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "Tokens per step (chunked prefill budget)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  sub->add_option("--kv-cache-dtype", f->kv_cache_dtype, "auto, fp32, bf16, fp8, nvfp4")->capture_default_str();
  sub->add_option("--index-cache-dtype", f->index_cache_dtype, "MSA index-key cache: auto (follows the KV cache), fp32, bf16, fp8, nvfp4")
      ->capture_default_str();
  sub->add_option("--index-query-dtype", f->index_query_dtype,
                  "MSA indexer query: fp32, or rounded per head to fp8 (one E4M3 value) or fp8x2 (two)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "fp8", "fp8x2"}));
  sub->add_option("--attention-operands", f->attention_operands,
                  "Attention's Q and softmax weights: fp32, or rounded to 16 bits (FP16 for fp8 and nvfp4 caches, BF16 otherwise)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "16bit"}));
  sub->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "Fraction of the device's memory the engine may use (on the CPU: of host memory)")
      ->capture_default_str();
  sub->add_option("--kv-cache-memory", f->kv_cache_memory, "Bytes for the KV cache, instead of the computed budget")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  sub->add_option("--served-model-name", f->served_model_name, "Model name in the API (default: the model path)");
  sub->add_option("--chat-template", f->chat_template, "Chat template: a file, or the template text (default: tokenizer_config.json's)");
  sub->add_option("--threads", f->threads, "CPU threads (default: all cores)");
  sub->add_option("--max-body-bytes", f->max_body_bytes, "Largest request body accepted (413 beyond)")
      ->capture_default_str()->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
  sub->add_flag("--progress", f->progress, "Show the loading progress bar even when piped");
  sub->add_option("--device", f->device, "auto (the GPU when one is visible), cuda, cpu")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  sub->add_flag("--enforce-eager", f->enforce_eager, "Launch decode steps op by op instead of from recorded CUDA graphs");
  sub->callback([f, &exit_code] {
    run_serve(*f);
    exit_code = 0;
  });
}

}  // namespace fp4::cli
