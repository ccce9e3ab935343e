#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace fp4::tokenizer {

using detail::Json;
using detail::JsonAt;

BpeModel BpeModel::from_json(const Json& model, const JsonAt& at) {
  const std::string type = detail::type_field(model, at);
  FP4_CHECK(type == "BPE", "{}: the model '{}' is not supported (only BPE is)", at.where(), type);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    FP4_CHECK(detail::string_or(model, affix, "", at).empty(),
              "{}: a non-empty {} is not supported", at.where(), affix);
  }
  if (detail::has_value(model, "dropout")) {
    const Json& dropout = model.at("dropout");
    FP4_CHECK(dropout.is_number() && dropout.get<double>() == 0.0,
              "{}: BPE dropout {} is not supported (encoding would be random)", at.where(),
              dropout.dump());
  }
  BpeModel bpe;
  bpe.where_ = at.where();
  bpe.unk_token_ = detail::string_or(model, "unk_token", "", at);
  bpe.fuse_unk_ = detail::bool_or(model, "fuse_unk", false, at);
  bpe.byte_fallback_ = detail::bool_or(model, "byte_fallback", false, at);
  bpe.ignore_merges_ = detail::bool_or(model, "ignore_merges", false, at);

  const Json& vocab = detail::field(model, "vocab", at);
  FP4_CHECK(vocab.is_object(), "{}: expected an object of token: id", (at / "vocab").where());
  bpe.vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    const int32_t id = detail::id_value(id_json, at / "vocab" / token);
    bpe.vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  bpe.id_to_token_.resize(max_id + 1);
  bpe.has_id_.assign(max_id + 1, 0);
  for (const auto& [token, id] : bpe.vocab_) {
    if (bpe.has_id_[id]) continue;
    bpe.id_to_token_[id] = token;
    bpe.has_id_[id] = 1;
  }
  if (bpe.byte_fallback_) {
    bpe.byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      if (auto id = bpe.token_to_id(fmt::format("<0x{:02X}>", b))) bpe.byte_ids_[b] = *id;
    }
  }

  const Json& merges = detail::field(model, "merges", at);
  FP4_CHECK(merges.is_array(), "{}: expected a list", (at / "merges").where());
  bpe.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    const JsonAt merge_at = (at / "merges")[rank];
    std::string left, right;
    if (merge.is_string()) {
      // The older form "a b" cannot carry tokens with spaces, so it has exactly one space.
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      FP4_CHECK(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
                "{}: expected \"left right\" with one space, found '{}'", merge_at.where(), text);
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      FP4_CHECK(
          merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
          "{}: expected \"left right\" or [\"left\", \"right\"], found {}", merge_at.where(),
          merge.dump());
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    const auto left_id = bpe.token_to_id(left), right_id = bpe.token_to_id(right);
    const auto new_id = bpe.token_to_id(left + right);
    FP4_CHECK(left_id && right_id,
              "{}: merge of '{}' and '{}' names a token that is not in the vocab", merge_at.where(),
              left, right);
    FP4_CHECK(new_id.has_value(),
              "{}: merge of '{}' and '{}' makes '{}', which is not in the vocab", merge_at.where(),
              left, right, left + right);
    // A repeated pair takes its last rank, as in Hugging Face.
    bpe.merges_[pair_key(*left_id, *right_id)] = {static_cast<int32_t>(rank), *new_id};
  }
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(has_id_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      ids.push_back(*id);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1});
  };
  // One symbol per character; characters outside the vocab become byte tokens, or else the
  // unknown token (consecutive unknowns fused into one when fuse_unk). Like Hugging Face, a
  // pending unknown is not flushed before byte tokens, which only matters with an incomplete
  // set of byte tokens.
  bool unk_pending = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    next_char(word, pos);
    const std::string_view c = word.substr(start, pos - start);
    if (auto id = token_to_id(c)) {
      if (unk_pending) add(*token_to_id(unk_token_));
      unk_pending = false;
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char b : c) all = all && byte_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        for (char b : c) add(byte_ids_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (unk_token_.empty()) continue;  // dropped, as Hugging Face does without an unk_token
    const auto unk_id = token_to_id(unk_token_);
    FP4_CHECK(unk_id.has_value(), "{}: unk_token '{}' is not in the vocab", where_, unk_token_);
    if (unk_pending && !fuse_unk_) add(*unk_id);
    unk_pending = true;
  }
  if (unk_pending) add(*token_to_id(unk_token_));

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& other) const {  // the top is the lowest rank, then leftmost
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int32_t left_pos) {
    const int32_t right_pos = symbols[left_pos].next;
    if (right_pos < 0) return;
    if (const Merge* m = find_merge(symbols[left_pos].id, symbols[right_pos].id)) {
      queue.push({m->rank, left_pos, m->new_id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  std::vector<uint8_t> removed(symbols.size(), 0);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    // Entries go stale when a neighbour merged first; the pair must still make the same token.
    if (removed[top.pos] || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    removed[left.next] = 1;
    left.id = top.new_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (!removed[i]) ids.push_back(symbols[i].id);
  }
}

}  // namespace fp4::tokenizer
