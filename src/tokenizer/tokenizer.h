// Text to token ids and back, from a Hugging Face tokenizer.json, producing the ids that the
// Hugging Face `tokenizers` library produces. Supported: BPE models of the SentencePiece kind
// (Prepend/Replace normalizer or a Metaspace pre-tokenizer, byte fallback) and of the GPT-2
// byte-level kind (ByteLevel pre-tokenizer, optionally after a Split with the GPT-2 regex),
// added tokens, and the TemplateProcessing post-processor. Any other component is refused with
// an fp4::Error that names it and the file.
//
// A Tokenizer is immutable once loaded: copies share it, and any thread may encode or decode.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::tokenizer {

class Decoder;
struct TokenizerData;

class Tokenizer {
 public:
  // Reads tokenizer.json and, when the same folder has one, tokenizer_config.json.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // `config_json` is the text of tokenizer_config.json, empty when there is none; `source`
  // names the tokenizer.json text in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             std::string_view source = "tokenizer.json");

  // `text` must be valid UTF-8. add_special_tokens applies the post-processor (for Llama files
  // it prepends <s>), exactly as Hugging Face's encode(text, add_special_tokens) does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Ids without a token are skipped, as in Hugging Face.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // One past the largest id of the model's vocab and the added tokens (the logits' width).
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // Whether decode(..., skip_special_tokens=true) drops this id.
  bool is_special(int32_t id) const;

  // From tokenizer_config.json's bos_token and eos_token; -1 when not known.
  int32_t bos_id() const;
  int32_t eos_id() const;
  // tokenizer_config.json's add_bos_token when it says; otherwise whether the post-processor
  // puts a special token first.
  bool add_bos_token() const;

 private:
  friend class IncrementalDetokenizer;
  explicit Tokenizer(std::shared_ptr<const TokenizerData> data);
  // The string that `id` contributes to decoding, or nullptr when it contributes nothing.
  const std::string* decode_piece(int32_t id, bool skip_special_tokens) const;
  const Decoder& decoder() const;

  std::shared_ptr<const TokenizerData> data_;
};

}  // namespace fp4::tokenizer
