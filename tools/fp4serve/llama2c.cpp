#include "tools/fp4serve/llama2c.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/check.h"

namespace fp4::convert {
namespace {

using nlohmann::ordered_json;

// Both formats are little-endian and this code copies their bytes as they are.
static_assert(std::endian::native == std::endian::little);

// llama2.c's version 1 and 2 exports start with this uint32 ("ak42"); the legacy format
// starts directly with dim.
constexpr uint32_t kVersionedMagic = 0x616b3432;
constexpr std::string_view kSpaceMarker = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary

std::string describe(const Llama2cConfig& c) {
  return fmt::format("dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size "
                     "{} ({} classifier), seq_len {}", c.dim, c.hidden_dim, c.n_layers, c.n_heads,
                     c.n_kv_heads, c.vocab_size, c.shared_classifier ? "shared" : "separate",
                     c.seq_len);
}

int64_t checked_mul(int64_t a, int64_t b, const Llama2cConfig& c, const std::string& source) {
  int64_t r = 0;
  FP4_CHECK(!__builtin_mul_overflow(a, b, &r), "{}: the header's {} imply more bytes than a "
            "64-bit count holds; expected a llama2.c checkpoint header", source, describe(c));
  return r;
}

Llama2cConfig parse_header(const int32_t (&h)[7], const std::string& path) {
  FP4_CHECK(static_cast<uint32_t>(h[0]) != kVersionedMagic,
            "{}: offset 0 holds llama2.c's magic \"ak42\" (a version 1 or 2 export); expected "
            "the legacy version-0 format, whose header starts with dim", path);
  static const char* const kNames[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                        "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    // vocab_size alone may be negative: its sign says whether the classifier is shared.
    const bool ok = i == 5 ? h[i] != 0 && h[i] != INT32_MIN : h[i] > 0;
    FP4_CHECK(ok, "{}: header field {} at offset {} is {}, expected a {} integer", path,
              kNames[i], 4 * i, h[i], i == 5 ? "non-zero" : "positive");
  }
  Llama2cConfig c;
  c.dim = h[0], c.hidden_dim = h[1], c.n_layers = h[2], c.n_heads = h[3], c.n_kv_heads = h[4];
  c.vocab_size = std::abs(h[5]), c.seq_len = h[6];
  c.shared_classifier = h[5] > 0;
  FP4_CHECK(c.dim % c.n_heads == 0, "{}: dim {} (offset 0) is not a multiple of n_heads {} "
            "(offset 12); expected whole heads", path, c.dim, c.n_heads);
  FP4_CHECK(c.n_kv_heads <= c.n_heads && c.n_heads % c.n_kv_heads == 0,
            "{}: n_heads {} (offset 12) is not a multiple of n_kv_heads {} (offset 16); expected "
            "each KV head to serve the same number of query heads", path, c.n_heads, c.n_kv_heads);
  FP4_CHECK(c.head_dim() % 2 == 0, "{}: head size dim / n_heads = {} is odd; expected an even "
            "size, since RoPE rotates pairs", path, c.head_dim());
  return c;
}

std::string read_all(const std::string& path, const char* what) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  FP4_CHECK(!ec, "cannot read {} {}: {}", what, path, ec.message());
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "cannot open {} {}", what, path);
  std::string data(size, '\0');
  in.read(data.data(), static_cast<std::streamsize>(size));
  FP4_CHECK(static_cast<uint64_t>(in.gcount()) == size, "{}: read {} of its {} bytes", path,
            in.gcount(), size);
  return data;
}

// Code point boundaries of valid UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), or an empty vector when `s` is not valid UTF-8.
std::vector<size_t> code_point_starts(std::string_view s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3
                   : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return {};
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      // The second byte's range is narrower after these leads; that rules out overlong
      // forms, surrogates and code points past U+10FFFF.
      const unsigned char lo = k > 1 ? 0x80 : b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = k > 1 ? 0xBF : b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
      if (c < lo || c > hi) return {};
    }
    starts.push_back(i);
    i += n;
  }
  return starts;
}

}  // namespace

std::vector<Llama2cArray> llama2c_layout(const Llama2cConfig& c, const std::string& source) {
  const int64_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), h = c.hidden_dim, v = c.vocab_size;
  std::vector<std::pair<const char*, std::vector<int64_t>>> arrays = {
      {"token_embedding_table", {v, d}}, {"rms_att_weight", {L, d}}, {"wq", {L, d, d}},
      {"wk", {L, kv, d}},                {"wv", {L, kv, d}},         {"wo", {L, d, d}},
      {"rms_ffn_weight", {L, d}},        {"w1", {L, h, d}},          {"w2", {L, d, h}},
      {"w3", {L, h, d}},                 {"rms_final_weight", {d}},
      {"freq_cis_real", {c.seq_len, c.head_dim() / 2}},
      {"freq_cis_imag", {c.seq_len, c.head_dim() / 2}}};
  if (!c.shared_classifier) arrays.push_back({"wcls", {v, d}});
  std::vector<Llama2cArray> out;
  int64_t offset = 0;
  for (auto& [name, shape] : arrays) {
    int64_t count = 1;
    for (int64_t dim : shape) count = checked_mul(count, dim, c, source);
    out.push_back({name, shape, offset, count});
    FP4_CHECK(!__builtin_add_overflow(offset, count, &offset), "{}: the header's {} imply more "
              "floats than a 64-bit count holds", source, describe(c));
  }
  return out;
}

Llama2cCheckpoint read_llama2c_checkpoint(const std::string& path) {
  std::error_code ec;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  FP4_CHECK(!ec, "cannot read llama2.c checkpoint {}: {}", path, ec.message());
  FP4_CHECK(size >= kLlama2cHeaderBytes, "{}: the file has {} bytes, expected at least the "
            "28-byte header (7 x int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, "
            "vocab_size, seq_len)", path, size);
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "cannot open llama2.c checkpoint {}", path);
  int32_t header[7];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  FP4_CHECK(in.gcount() == kLlama2cHeaderBytes, "{}: could not read the 28-byte header", path);
  Llama2cCheckpoint ck{path, parse_header(header, path), {}};

  const std::vector<Llama2cArray> layout = llama2c_layout(ck.config, path);
  const int64_t floats = layout.back().offset + layout.back().count;
  const int64_t expected = kLlama2cHeaderBytes + checked_mul(floats, 4, ck.config, path);
  if (size < expected) {
    const int64_t have = (size - kLlama2cHeaderBytes) / 4;
    const auto cut = std::find_if(layout.begin(), layout.end(),
                                  [&](const Llama2cArray& a) { return a.offset + a.count > have; });
    fail("{}: the file ends at byte {}, inside array '{}' (bytes {} to {}); expected 28 + {} "
         "floats x 4 = {} bytes for the header's {} (truncated file?)", path, size, cut->name,
         kLlama2cHeaderBytes + cut->offset * 4, kLlama2cHeaderBytes + (cut->offset + cut->count) * 4,
         floats, expected, describe(ck.config));
  }
  FP4_CHECK(size == expected, "{}: {} bytes follow the last array '{}', which ends at byte {}; "
            "expected the file to end there: 28 + {} floats x 4 = {} bytes for the header's {} "
            "(an unshared classifier needs a negative vocab_size)", path, size - expected,
            layout.back().name, expected, floats, expected, describe(ck.config));
  ck.floats.resize(static_cast<size_t>(floats));
  in.read(reinterpret_cast<char*>(ck.floats.data()), static_cast<std::streamsize>(floats * 4));
  FP4_CHECK(in.gcount() == floats * 4, "{}: could not read the {} bytes after the header", path,
            floats * 4);
  return ck;
}

Llama2cTokenizer read_llama2c_tokenizer(const std::string& path, int64_t vocab_size) {
  const std::string data = read_all(path, "llama2.c tokenizer");
  Llama2cTokenizer t;
  t.path = path;
  size_t pos = 0;
  auto take = [&](size_t n, const std::string& what) {
    FP4_CHECK(data.size() - pos >= n, "{}: the file ends at byte {}, expected {} ({} bytes) at "
              "offset {} (truncated file, or a tokenizer for a smaller vocabulary than the "
              "checkpoint's {})", path, data.size(), what, n, pos, vocab_size);
    const char* p = data.data() + pos;
    pos += n;
    return p;
  };
  std::memcpy(&t.max_token_length, take(4, "the int32 max_token_length"), 4);
  FP4_CHECK(t.max_token_length > 0, "{}: max_token_length at offset 0 is {}, expected a positive "
            "byte count", path, t.max_token_length);
  for (int64_t id = 0; id < vocab_size; ++id) {
    const size_t record = pos;
    float score = 0;
    int32_t length = 0;
    std::memcpy(&score, take(4, fmt::format("token {}'s float32 score", id)), 4);
    std::memcpy(&length, take(4, fmt::format("token {}'s int32 length", id)), 4);
    FP4_CHECK(std::isfinite(score), "{}: token {} (record at offset {}) has score {}, expected a "
              "finite number", path, id, record, score);
    FP4_CHECK(length >= 1 && length <= t.max_token_length, "{}: token {} (record at offset {}) "
              "has length {}, expected 1 to max_token_length = {}", path, id, record, length,
              t.max_token_length);
    const char* bytes = take(static_cast<size_t>(length), fmt::format("token {}'s bytes", id));
    t.pieces.emplace_back(bytes, static_cast<size_t>(length));
    t.scores.push_back(score);
  }
  FP4_CHECK(pos == data.size(), "{}: {} bytes follow the {} token records, which end at offset "
            "{}; expected the file to end there (a tokenizer for a larger vocabulary than the "
            "checkpoint's?)", path, data.size() - pos, vocab_size, pos);
  return t;
}

std::vector<float> permute_rope_rows(std::span<const float> w, int64_t n_heads, int64_t head_dim,
                                     int64_t in_dim) {
  if (static_cast<int64_t>(w.size()) != n_heads * head_dim * in_dim || head_dim % 2 != 0) {
    fail_internal("permute_rope_rows: {} values for {} heads x {} rows x {} columns", w.size(),
                  n_heads, head_dim, in_dim);
  }
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t r = 0; r < head_dim; ++r) {
      const int64_t to = h * head_dim + (r % 2) * half + r / 2;
      std::copy_n(w.begin() + (h * head_dim + r) * in_dim, in_dim, out.begin() + to * in_dim);
    }
  }
  return out;
}

HfWeights hf_llama_weights(Llama2cCheckpoint checkpoint) {
  const Llama2cConfig& c = checkpoint.config;
  const std::vector<Llama2cArray> layout = llama2c_layout(c, checkpoint.path);
  auto array = [&](std::string_view name) -> const Llama2cArray& {
    return *std::find_if(layout.begin(), layout.end(),
                         [&](const Llama2cArray& a) { return a.name == name; });
  };
  if (static_cast<int64_t>(checkpoint.floats.size()) != layout.back().offset + layout.back().count) {
    fail_internal("{}: {} floats in memory, the header implies {}", checkpoint.path,
                  checkpoint.floats.size(), layout.back().offset + layout.back().count);
  }
  HfWeights w;
  w.floats = std::move(checkpoint.floats);
  auto add = [&](std::string name, const Llama2cArray& a) {
    w.tensors.push_back({std::move(name), a.shape, a.offset, a.count});
  };
  // Layer l of a per-layer array: the array without its leading n_layers dimension.
  auto layer = [&](const std::string& name, std::string_view array_name, int64_t l) {
    const Llama2cArray& a = array(array_name);
    const int64_t count = a.count / c.n_layers;
    const std::vector<int64_t> shape(a.shape.begin() + 1, a.shape.end());
    w.tensors.push_back({fmt::format("model.layers.{}.{}", l, name), shape,
                         a.offset + l * count, count});
    return std::span<float>(w.floats).subspan(static_cast<size_t>(a.offset + l * count),
                                              static_cast<size_t>(count));
  };
  add("model.embed_tokens.weight", array("token_embedding_table"));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    layer("input_layernorm.weight", "rms_att_weight", l);
    for (auto [proj, heads] : {std::pair{"q", c.n_heads}, std::pair{"k", c.n_kv_heads}}) {
      const std::span<float> rows =
          layer(fmt::format("self_attn.{}_proj.weight", proj), std::string("w") + proj, l);
      const std::vector<float> permuted = permute_rope_rows(rows, heads, c.head_dim(), c.dim);
      std::copy(permuted.begin(), permuted.end(), rows.begin());
    }
    layer("self_attn.v_proj.weight", "wv", l);
    layer("self_attn.o_proj.weight", "wo", l);
    layer("post_attention_layernorm.weight", "rms_ffn_weight", l);
    layer("mlp.gate_proj.weight", "w1", l);
    layer("mlp.up_proj.weight", "w3", l);
    layer("mlp.down_proj.weight", "w2", l);
  }
  add("model.norm.weight", array("rms_final_weight"));
  if (!c.shared_classifier) add("lm_head.weight", array("wcls"));
  return w;
}

ordered_json hf_llama_config(const Llama2cConfig& c) {
  return {{"architectures", ordered_json::array({"LlamaForCausalLM"})}, {"model_type", "llama"},
          {"hidden_size", c.dim}, {"intermediate_size", c.hidden_dim},
          {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads}, {"head_dim", c.head_dim()},
          {"vocab_size", c.vocab_size}, {"max_position_embeddings", c.seq_len},
          {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"hidden_act", "silu"},
          {"attention_bias", false}, {"mlp_bias", false},
          {"tie_word_embeddings", c.shared_classifier}, {"bos_token_id", 1},
          {"eos_token_id", 2}, {"torch_dtype", "float32"}};
}

ordered_json hf_generation_config() { return {{"bos_token_id", 1}, {"eos_token_id", 2}}; }

ordered_json hf_tokenizer_config(const Llama2cConfig& c) {
  // legacy: the Prepend normalizer also runs on text after a special token, as in the
  // original Llama tokenizer.json.
  return {{"tokenizer_class", "LlamaTokenizerFast"}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
          {"unk_token", "<unk>"}, {"add_bos_token", true}, {"add_eos_token", false},
          {"model_max_length", c.seq_len}, {"clean_up_tokenization_spaces", false},
          {"legacy", true}};
}

std::vector<std::string> hf_pieces(const Llama2cTokenizer& t) {
  static const char* const kStored[3] = {"<unk>", "\n<s>\n", "\n</s>\n"};
  static const char* const kNamed[3] = {"<unk>", "<s>", "</s>"};
  FP4_CHECK(t.pieces.size() >= 3, "{}: {} tokens, expected at least <unk>, <s> and </s>", t.path,
            t.pieces.size());
  std::vector<std::string> out;
  std::unordered_map<std::string, size_t> seen;
  for (size_t id = 0; id < t.pieces.size(); ++id) {
    const std::string& p = t.pieces[id];
    FP4_CHECK(id >= 3 || p == kStored[id], "{}: token {} is {}, expected {} (llama2.c's export "
              "of SentencePiece's {})", t.path, id, ordered_json(p).dump(),
              ordered_json(kStored[id]).dump(), kNamed[id]);
    FP4_CHECK(!code_point_starts(p).empty(), "{}: token {} ({} bytes: {:02x}) is not valid "
              "UTF-8; expected SentencePiece pieces", t.path, id, p.size(),
              fmt::join(std::vector<unsigned char>(p.begin(), p.end()), " "));
    std::string piece;
    if (id < 3) {
      piece = kNamed[id];
    } else {
      for (const char& ch : p) piece += ch == ' ' ? kSpaceMarker : std::string_view(&ch, 1);
    }
    const auto [it, fresh] = seen.emplace(piece, id);
    FP4_CHECK(fresh, "{}: tokens {} and {} are both {}; expected distinct pieces", t.path,
              it->second, id, ordered_json(piece).dump());
    out.push_back(std::move(piece));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> sentencepiece_merges(
    const std::vector<std::string>& pieces, const std::vector<float>& scores) {
  std::unordered_map<std::string_view, int64_t> ids;
  for (size_t i = 0; i < pieces.size(); ++i) ids.emplace(pieces[i], static_cast<int64_t>(i));
  struct Merge {
    float score;
    int64_t merged, left, right;
  };
  std::vector<Merge> merges;
  for (size_t m = 0; m < pieces.size(); ++m) {
    const std::string_view p = pieces[m];
    for (size_t k : code_point_starts(p)) {
      if (k == 0) continue;
      const auto l = ids.find(p.substr(0, k)), r = ids.find(p.substr(k));
      if (l != ids.end() && r != ids.end()) {
        merges.push_back({scores[m], static_cast<int64_t>(m), l->second, r->second});
      }
    }
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return std::tie(a.merged, a.left, a.right) < std::tie(b.merged, b.left, b.right);
  });
  std::vector<std::pair<std::string, std::string>> out;
  for (const Merge& m : merges) out.emplace_back(pieces[m.left], pieces[m.right]);
  return out;
}

ordered_json hf_tokenizer_json(const Llama2cTokenizer& t) {
  const std::vector<std::string> pieces = hf_pieces(t);
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
  // "left right" strings: the merge format every tokenizers version reads. It is unambiguous
  // because no piece holds an ASCII space (hf_pieces turned them all into U+2581).
  ordered_json merges = ordered_json::array();
  for (const auto& [l, r] : sentencepiece_merges(pieces, t.scores)) merges.push_back(l + " " + r);
  ordered_json added = ordered_json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id}, {"content", pieces[static_cast<size_t>(id)]},
                     {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  const std::string marker(kSpaceMarker);
  auto replace = [](const std::string& from, const std::string& to) {
    return ordered_json{{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
  };
  auto special = [](const char* id, int type_id) {
    return ordered_json{{"SpecialToken", {{"id", id}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* id, int type_id) {
    return ordered_json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  ordered_json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  const ordered_json prepend = {{"type", "Prepend"}, {"prepend", marker}};
  tok["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", ordered_json::array({prepend, replace(" ", marker)})}};
  tok["pre_tokenizer"] = nullptr;
  const ordered_json bos = {{"id", "<s>"}, {"ids", ordered_json::array({1})},
                            {"tokens", ordered_json::array({"<s>"})}};
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", ordered_json::array({special("<s>", 0), sequence("A", 0)})},
      {"pair", ordered_json::array({special("<s>", 0), sequence("A", 0), special("<s>", 1),
                                    sequence("B", 1)})},
      {"special_tokens", {{"<s>", bos}}}};
  tok["decoder"] = {
      {"type", "Sequence"},
      {"decoders", ordered_json::array({replace(marker, " "), {{"type", "ByteFallback"}},
                                        {{"type", "Fuse"}},
                                        {{"type", "Strip"}, {"content", " "}, {"start", 1},
                                         {"stop", 0}}})}};
  tok["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
                  {"vocab", vocab}, {"merges", merges}};
  return tok;
}

}  // namespace fp4::convert
