// llama2.c's legacy (version 0) checkpoint and its tokenizer file, read and turned into a
// Hugging Face Llama layout: F32 weights under HF names with the q/k rows permuted for
// half-split RoPE, config.json, and a SentencePiece-style BPE tokenizer.json. The byte formats
// are described in docs/convert.md; every size is checked before anything is used.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fp4::convert {

// The 7 int32 header fields. A negative vocab_size in the file means an unshared classifier
// follows the legacy RoPE tables; here vocab_size is its absolute value.
struct Llama2cConfig {
  int64_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0;
  int64_t vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
};

constexpr int64_t kLlama2cHeaderBytes = 28;

// One fp32 array of the checkpoint; offset and count in floats from the end of the header.
struct Llama2cArray {
  std::string name;  // llama2.c's name: wq, rms_att_weight, freq_cis_real, wcls, ...
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t count = 0;
};

// The arrays in file order, as the header's dims imply them. Throws fp4::Error naming
// `source` when the dims imply more than an int64 count.
std::vector<Llama2cArray> llama2c_layout(const Llama2cConfig& config,
                                         const std::string& source = "llama2.c header");

struct Llama2cCheckpoint {
  std::string path;
  Llama2cConfig config;
  std::vector<float> floats;  // everything after the header, in file order
};

// Throws fp4::Error naming the file, the offset and what was expected when the header has a
// non-positive or inconsistent dim, or the file size is not 28 + 4 x (floats the dims imply).
Llama2cCheckpoint read_llama2c_checkpoint(const std::string& path);

struct Llama2cTokenizer {
  std::string path;
  int32_t max_token_length = 0;
  std::vector<std::string> pieces;  // bytes as stored ("\n<s>\n", " the", "<0x0A>", ...)
  std::vector<float> scores;
};

// Reads `vocab_size` records (the file does not store the count). Throws fp4::Error naming the
// file, the token and the offset when a record is cut short, a length is out of range, a
// score is not finite, or bytes are left after the last record.
Llama2cTokenizer read_llama2c_tokenizer(const std::string& path, int64_t vocab_size);

// Reorders the output rows of a [n_heads x head_dim, in_dim] projection, within each head, so
// that row 2j moves to j and row 2j + 1 to j + head_dim / 2: adjacent-pair RoPE on the old
// rows equals half-split RoPE on the new ones.
std::vector<float> permute_rope_rows(std::span<const float> w, int64_t n_heads, int64_t head_dim,
                                     int64_t in_dim);

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into HfWeights::floats
  int64_t count = 0;
};

// The HF-Llama tensors as views into one buffer: the checkpoint's floats with wq and wk
// permuted in place, so the conversion needs no second copy of the model.
struct HfWeights {
  std::vector<float> floats;
  std::vector<HfTensor> tensors;  // in the order they are written
  std::span<const float> values(const HfTensor& t) const {
    return std::span<const float>(floats).subspan(static_cast<size_t>(t.offset),
                                                  static_cast<size_t>(t.count));
  }
};

HfWeights hf_llama_weights(Llama2cCheckpoint checkpoint);

nlohmann::ordered_json hf_llama_config(const Llama2cConfig& config);
nlohmann::ordered_json hf_generation_config();
nlohmann::ordered_json hf_tokenizer_config(const Llama2cConfig& config);

// The vocabulary as Hugging Face pieces: ' ' back to U+2581 and ids 0/1/2 named <unk>, <s>,
// </s>. Throws fp4::Error when a piece is not UTF-8, ids 0-2 are not llama2.c's special
// tokens, or two pieces are equal.
std::vector<std::string> hf_pieces(const Llama2cTokenizer& tokenizer);

// Every split of every piece into two vocabulary pieces, ranked as a merge: higher score of
// the merged piece first; equal scores -> lower id of the merged piece first; splits of one
// piece -> lower id of the left half, then of the right half.
std::vector<std::pair<std::string, std::string>> sentencepiece_merges(
    const std::vector<std::string>& pieces, const std::vector<float>& scores);

nlohmann::ordered_json hf_tokenizer_json(const Llama2cTokenizer& tokenizer);

}  // namespace fp4::convert
