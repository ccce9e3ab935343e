#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <unordered_map>

#include "tokenizer/unicode.h"

namespace fp4::tokenizer {
namespace {

char32_t last_char(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_char(text, start);
}

char32_t first_char(std::string_view text) {
  size_t pos = 0;
  return next_char(text, pos);
}

// The start of the whitespace run that ends `text` (Hugging Face's \s*$).
size_t trailing_space_start(std::string_view text) {
  size_t start = text.size();
  while (start > 0) {
    size_t prev = start - 1;
    while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
    size_t pos = prev;
    if (!is_whitespace(next_char(text, pos))) break;
    start = prev;
  }
  return start;
}

// The length of the whitespace run that starts `text` (^\s*).
size_t leading_space_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!is_whitespace(next_char(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  for (char c : key) {
    const auto byte = static_cast<uint8_t>(c);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, uint8_t b) { return child.first < b; });
    if (it == children.end() || it->first != byte) {
      it = children.insert(it, {byte, static_cast<int32_t>(nodes.size())});
      const int32_t child = it->second;
      nodes.emplace_back();
      node = child;
    } else {
      node = it->second;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                             size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    const auto it = std::lower_bound(children.begin(), children.end(), byte,
                                     [](const auto& child, uint8_t b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - pos};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer) {
  // A repeated content keeps its first id and takes the later entry's options; once special,
  // it stays special (Hugging Face's add_tokens).
  std::unordered_map<std::string, size_t> index;
  for (AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    const auto [it, inserted] = index.emplace(token.content, tokens_.size());
    if (inserted) {
      tokens_.push_back(std::move(token));
    } else {
      AddedToken& kept = tokens_[it->second];
      token.special = token.special || kept.special;
      token.id = kept.id;
      kept = std::move(token);
    }
  }
  // Hugging Face gives special tokens precedence in its matcher; with contents unique this
  // only matters for the order of equal-length matches, which cannot differ in content.
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    if (token.normalized) {
      const std::string pattern = normalizer.apply(token.content);
      if (!pattern.empty()) normalized_.insert(pattern, static_cast<int32_t>(i));
    } else {
      raw_.insert(token.content, static_cast<int32_t>(i));
    }
  }
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized) const {
  const Trie& trie = normalized ? normalized_ : raw_;
  std::vector<Segment> segments;
  size_t emitted = 0;  // end of the last segment
  const bool no_tokens = trie.nodes[0].children.empty();
  for (size_t pos = 0; pos < text.size() && !no_tokens;) {
    const auto [index, length] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, stop = pos + length;
    // The scan resumes after the match even when the match is dropped, as Hugging Face's
    // Aho-Corasick iterator does.
    pos = stop;
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(last_char(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(first_char(text.substr(stop)));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (emitted < start) segments.push_back({text.substr(emitted, start - emitted), emitted, -1});
    segments.push_back({text.substr(start, stop - start), start, token.id});
    emitted = stop;
  }
  if (emitted < text.size()) segments.push_back({text.substr(emitted), emitted, -1});
  return segments;
}

}  // namespace fp4::tokenizer
