#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace fp4::tokenizer {

using detail::Json;
using detail::JsonAt;

// One step of the post-processor: TemplateProcessing's "single" template, where each item is
// either the encoded sequence or the ids of a special token.
struct TemplateItem {
  bool sequence = false;
  std::vector<int32_t> ids;
};
using Template = std::vector<TemplateItem>;

struct TokenizerData {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  Decoder decoder;
  std::vector<Template> post_processor;  // applied in order
  // What an added token contributes to decoding: its content, normalized when the token is
  // matched in normalized text (Hugging Face hands the decoder that form, e.g. "▁<tok>").
  std::unordered_map<int32_t, std::string> added_text;
  TokenMap added_by_content;
  std::unordered_set<std::string> special_contents;
  int32_t vocab_size = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos_token = false;
};

namespace {

Json parse_json(std::string_view text, const std::string& source) {
  try {
    Json root = Json::parse(text);
    FP4_CHECK(root.is_object(), "{}: expected a JSON object at the top level", source);
    return root;
  } catch (const Json::exception& e) {
    fail("{}: not valid JSON ({})", source, e.what());
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "{}: cannot open the file", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<AddedToken> parse_added_tokens(const Json& root, const BpeModel& model,
                                           const JsonAt& at) {
  std::vector<AddedToken> tokens;
  if (!detail::has_value(root, "added_tokens")) return tokens;
  const Json& list = root.at("added_tokens");
  FP4_CHECK(list.is_array(), "{}: expected a list", (at / "added_tokens").where());
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonAt token_at = (at / "added_tokens")[i];
    const Json& entry = list[i];
    AddedToken token;
    token.content = detail::string_field(entry, "content", token_at);
    // Hugging Face gives a token that the model's vocab already holds the model's id.
    const auto model_id = model.token_to_id(token.content);
    token.id = model_id ? *model_id
                        : detail::id_value(detail::field(entry, "id", token_at), token_at / "id");
    token.single_word = detail::bool_or(entry, "single_word", false, token_at);
    token.lstrip = detail::bool_or(entry, "lstrip", false, token_at);
    token.rstrip = detail::bool_or(entry, "rstrip", false, token_at);
    token.special = detail::bool_or(entry, "special", false, token_at);
    token.normalized = detail::bool_or(entry, "normalized", !token.special, token_at);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

void parse_post_processor(const Json& processor, const JsonAt& at, std::vector<Template>& out) {
  if (processor.is_null()) return;
  const std::string type = detail::type_field(processor, at);
  if (type == "Sequence") {
    const Json& list = detail::field(processor, "processors", at);
    FP4_CHECK(list.is_array(), "{}: expected a list", (at / "processors").where());
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(list[i], (at / "processors")[i], out);
  } else if (type == "ByteLevel") {
    // It only adjusts offsets; the ids are untouched.
  } else if (type == "TemplateProcessing") {
    const Json& single = detail::field(processor, "single", at);
    const Json& specials = detail::field(processor, "special_tokens", at);
    FP4_CHECK(single.is_array(), "{}: expected a list", (at / "single").where());
    Template pieces;
    for (size_t i = 0; i < single.size(); ++i) {
      const JsonAt item_at = (at / "single")[i];
      if (detail::has_value(single[i], "Sequence")) {
        pieces.push_back({true, {}});
        continue;
      }
      const Json& special = detail::field(single[i], "SpecialToken", item_at);
      const std::string name = detail::string_field(special, "id", item_at / "SpecialToken");
      const JsonAt special_at = at / "special_tokens" / name;
      const Json& ids =
          detail::field(detail::field(specials, name, at / "special_tokens"), "ids", special_at);
      FP4_CHECK(ids.is_array(), "{}: expected a list of ids", (special_at / "ids").where());
      TemplateItem item;
      for (size_t k = 0; k < ids.size(); ++k)
        item.ids.push_back(detail::id_value(ids[k], (special_at / "ids")[k]));
      pieces.push_back(std::move(item));
    }
    out.push_back(std::move(pieces));
  } else {
    fail(
        "{}: the post-processor '{}' is not supported (supported: TemplateProcessing, ByteLevel, "
        "Sequence)",
        at.where(), type);
  }
}

// bos_token / eos_token: a string, or an AddedToken object {"content": ...}; null means none.
int32_t config_token_id(const Json& config, std::string_view key, const TokenizerData& data,
                        const JsonAt& at) {
  if (!detail::has_value(config, key)) return -1;
  const Json& value = config.at(key);
  const std::string content = value.is_string() ? value.get<std::string>()
                                                : detail::string_field(value, "content", at / key);
  const auto it = data.added_by_content.find(content);
  if (it != data.added_by_content.end()) return it->second;
  const auto id = data.model.token_to_id(content);
  FP4_CHECK(id.has_value(), "{}: {} '{}' is not a token of the tokenizer", (at / key).where(), key,
            content);
  return *id;
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerData> data) : data_(std::move(data)) {}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  const std::filesystem::path config_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  const std::string config =
      std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
  return from_json(read_file(tokenizer_json), config, tokenizer_json.string());
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               std::string_view source) {
  const JsonAt at{std::string(source), ""};
  const Json root = parse_json(tokenizer_json, at.file);
  auto data = std::make_shared<TokenizerData>();
  data->normalizer = Normalizer::from_json(root.value("normalizer", Json()), at / "normalizer");
  data->pre_tokenizer =
      PreTokenizer::from_json(root.value("pre_tokenizer", Json()), at / "pre_tokenizer");
  data->model = BpeModel::from_json(detail::field(root, "model", at), at / "model");
  data->decoder = Decoder::from_json(root.value("decoder", Json()), at / "decoder");
  parse_post_processor(root.value("post_processor", Json()), at / "post_processor",
                       data->post_processor);
  data->added = AddedVocabulary(parse_added_tokens(root, data->model, at), data->normalizer);

  int32_t max_id = data->model.max_id();
  for (const AddedToken& token : data->added.tokens()) {
    data->added_text[token.id] =
        token.normalized ? data->normalizer.apply(token.content) : token.content;
    data->added_by_content.emplace(token.content, token.id);
    if (token.special) data->special_contents.insert(token.content);
    max_id = std::max(max_id, token.id);
  }
  data->vocab_size = max_id + 1;
  for (const Template& pieces : data->post_processor) {
    for (const TemplateItem& item : pieces) {
      for (int32_t id : item.ids) {
        FP4_CHECK(id < data->vocab_size, "{}: the template's id {} is outside the vocab (size {})",
                  (at / "post_processor").where(), id, data->vocab_size);
      }
    }
  }

  const auto& pp = data->post_processor;
  data->add_bos_token = !pp.empty() && !pp.front().empty() && !pp.front()[0].sequence;
  if (!config_json.empty()) {
    const std::filesystem::path config_name =
        std::filesystem::path(std::string(source)).parent_path() / "tokenizer_config.json";
    const JsonAt config_at{config_name.string(), ""};
    const Json config = parse_json(config_json, config_at.file);
    data->bos_id = config_token_id(config, "bos_token", *data, config_at);
    data->eos_id = config_token_id(config, "eos_token", *data, config_at);
    data->add_bos_token = detail::bool_or(config, "add_bos_token", data->add_bos_token, config_at);
  }
  return Tokenizer(std::move(data));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t invalid = find_invalid_utf8(text);
  FP4_CHECK(invalid == std::string_view::npos,
            "tokenizer input: not valid UTF-8 (at byte {} of {})", invalid, text.size());
  const TokenizerData& d = *data_;
  std::vector<int32_t> ids;
  std::vector<Piece> words;
  // Added tokens are cut out of the raw text first, then each stretch between them is
  // normalized and searched for the added tokens that match normalized text.
  for (const Segment& raw : d.added.split(text, /*normalized=*/false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string normalized = d.normalizer.apply(raw.text);
    for (const Segment& part : d.added.split(normalized, /*normalized=*/true)) {
      if (part.id >= 0) {
        ids.push_back(part.id);
        continue;
      }
      words.clear();
      d.pre_tokenizer.split({std::string(part.text), raw.offset == 0 && part.offset == 0}, words);
      for (const Piece& word : words) d.model.tokenize(word.text, ids);
    }
  }
  if (!add_special_tokens) return ids;
  for (const Template& pieces : d.post_processor) {
    std::vector<int32_t> out;
    for (const TemplateItem& item : pieces) {
      const std::vector<int32_t>& part = item.sequence ? ids : item.ids;
      out.insert(out.end(), part.begin(), part.end());
    }
    ids = std::move(out);
  }
  return ids;
}

const std::string* Tokenizer::decode_piece(int32_t id, bool skip_special_tokens) const {
  const TokenizerData& d = *data_;
  const auto it = d.added_text.find(id);
  const std::string* token = it != d.added_text.end() ? &it->second : d.model.id_to_token(id);
  if (token != nullptr && skip_special_tokens && d.special_contents.contains(*token))
    return nullptr;
  return token;
}

const Decoder& Tokenizer::decoder() const { return data_->decoder; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const std::string* token = decode_piece(id, skip_special_tokens)) tokens.push_back(*token);
  }
  return data_->decoder.decode(std::move(tokens), DecodeWindow{}).text;
}

int32_t Tokenizer::vocab_size() const { return data_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = data_->added_by_content.find(token);
  if (it != data_->added_by_content.end()) return it->second;
  return data_->model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const std::string* token = decode_piece(id, false);
  return token ? std::optional<std::string>(*token) : std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  const std::string* token = decode_piece(id, false);
  return token != nullptr && data_->special_contents.contains(*token);
}

int32_t Tokenizer::bos_id() const { return data_->bos_id; }
int32_t Tokenizer::eos_id() const { return data_->eos_id; }
bool Tokenizer::add_bos_token() const { return data_->add_bos_token; }

}  // namespace fp4::tokenizer
