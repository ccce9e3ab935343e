#include "tokenizer/pretokenize.h"

#include <array>

#include "tokenizer/unicode.h"

namespace fp4::tokenizer {
namespace {

using detail::Json;
using detail::JsonAt;

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass classify(char32_t cp) {
  if (is_letter(cp)) return CharClass::kLetter;
  if (is_number(cp)) return CharClass::kNumber;
  if (is_whitespace(cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

// The length in characters of the kGpt2Pattern match at `i`. The alternatives are tried in
// order, as the regex engine does (the first that matches wins, not the longest).
size_t gpt2_match(const std::vector<char32_t>& cps, const std::vector<CharClass>& cls, size_t i) {
  const size_t n = cps.size();
  if (cps[i] == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
    const char32_t a = cps[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < n) {
      const char32_t b = cps[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
  }
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional literal space, then a run of
  // one class. A space not followed by such a run falls through to the whitespace rules.
  const size_t start = cps[i] == ' ' && i + 1 < n && cls[i + 1] != CharClass::kSpace ? i + 1 : i;
  if (cls[start] != CharClass::kSpace) {
    size_t end = start + 1;
    while (end < n && cls[end] == cls[start]) ++end;
    return end - i;
  }
  // "\s+(?!\S)" backs off one character from a whitespace run that a non-space follows, so
  // that this last space can lead the next word; a single space falls to "\s+".
  size_t end = i + 1;
  while (end < n && cls[end] == CharClass::kSpace) ++end;
  if (end < n && end - i > 1) --end;
  return end - i;
}

struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 0x144> byte_of;  // the stand-ins reach U+0143
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables = [] {
    ByteLevelTables t;
    t.byte_of.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others take U+0100 onwards in order.
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(t.chars[b], cp);
      t.byte_of[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos;
       pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces) {
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
  for (size_t pos = 0; pos < text.size();) {
    offsets.push_back(pos);
    cps.push_back(next_char(text, pos));
  }
  offsets.push_back(text.size());
  std::vector<CharClass> cls(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) cls[i] = classify(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    const size_t len = gpt2_match(cps, cls, i);
    pieces.push_back(text.substr(offsets[i], offsets[i + len] - offsets[i]));
    i += len;
  }
}

std::string_view byte_level_char(uint8_t byte) { return byte_level_tables().chars[byte]; }

int byte_level_byte(char32_t cp) {
  const auto& byte_of = byte_level_tables().byte_of;
  return cp < byte_of.size() ? byte_of[cp] : -1;
}

Normalizer Normalizer::from_json(const Json& normalizer, const JsonAt& at) {
  Normalizer result;
  if (!normalizer.is_null()) result.add(normalizer, at);
  return result;
}

void Normalizer::add(const Json& normalizer, const JsonAt& at) {
  const std::string type = detail::type_field(normalizer, at);
  if (type == "Sequence") {
    const Json& list = detail::field(normalizer, "normalizers", at);
    FP4_CHECK(list.is_array(), "{}: expected a list", (at / "normalizers").where());
    for (size_t i = 0; i < list.size(); ++i) add(list[i], (at / "normalizers")[i]);
  } else if (type == "Prepend") {
    steps_.push_back({Step::Kind::kPrepend, detail::string_field(normalizer, "prepend", at), {}});
  } else if (type == "Replace") {
    const detail::Pattern pattern = detail::pattern_field(normalizer, at);
    FP4_CHECK(!pattern.is_regex,
              "{}: the Replace normalizer with a regex pattern ('{}') is not supported", at.where(),
              pattern.text);
    FP4_CHECK(!pattern.text.empty(), "{}: the Replace pattern is empty", at.where());
    steps_.push_back(
        {Step::Kind::kReplace, pattern.text, detail::string_field(normalizer, "content", at)});
  } else {
    fail("{}: the normalizer '{}' is not supported (supported: Sequence, Prepend, Replace)",
         at.where(), type);
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    if (step.kind == Step::Kind::kPrepend) {
      if (!out.empty()) out.insert(0, step.text);
    } else {
      out = replace_all(out, step.text, step.content);
    }
  }
  return out;
}

PreTokenizer PreTokenizer::from_json(const Json& pre_tokenizer, const JsonAt& at) {
  PreTokenizer result;
  if (!pre_tokenizer.is_null()) result.add(pre_tokenizer, at);
  return result;
}

void PreTokenizer::add(const Json& pre_tokenizer, const JsonAt& at) {
  const std::string type = detail::type_field(pre_tokenizer, at);
  Step step;
  if (type == "Sequence") {
    const Json& list = detail::field(pre_tokenizer, "pretokenizers", at);
    FP4_CHECK(list.is_array(), "{}: expected a list", (at / "pretokenizers").where());
    for (size_t i = 0; i < list.size(); ++i) add(list[i], (at / "pretokenizers")[i]);
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = detail::bool_or(pre_tokenizer, "add_prefix_space", false, at);
    step.use_regex = detail::bool_or(pre_tokenizer, "use_regex", true, at);
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.replacement = detail::string_or(pre_tokenizer, "replacement", "\xE2\x96\x81", at);
    FP4_CHECK(!step.replacement.empty(), "{}: the Metaspace replacement is empty", at.where());
    step.split = detail::bool_or(pre_tokenizer, "split", true, at);
    // Files written before prepend_scheme existed say add_prefix_space instead.
    const bool prefix = detail::bool_or(pre_tokenizer, "add_prefix_space", true, at);
    const std::string scheme =
        detail::string_or(pre_tokenizer, "prepend_scheme", prefix ? "always" : "never", at);
    if (scheme == "always") {
      step.prepend_scheme = PrependScheme::kAlways;
    } else if (scheme == "first") {
      step.prepend_scheme = PrependScheme::kFirst;
    } else if (scheme == "never") {
      step.prepend_scheme = PrependScheme::kNever;
    } else {
      fail("{}: prepend_scheme '{}' is not one of always, first, never",
           (at / "prepend_scheme").where(), scheme);
    }
  } else if (type == "Split") {
    const detail::Pattern pattern = detail::pattern_field(pre_tokenizer, at);
    FP4_CHECK(
        pattern.is_regex && pattern.text == kGpt2Pattern,
        "{}: the Split pre-tokenizer pattern '{}' is not supported (only the GPT-2 regex {} is)",
        at.where(), pattern.text, kGpt2Pattern);
    const std::string behavior = detail::string_or(pre_tokenizer, "behavior", "Isolated", at);
    FP4_CHECK(behavior == "Isolated", "{}: Split behavior '{}' is not supported (only Isolated is)",
              at.where(), behavior);
    FP4_CHECK(!detail::bool_or(pre_tokenizer, "invert", false, at),
              "{}: Split with invert=true is not supported", at.where());
    step.kind = Step::Kind::kGpt2Split;
  } else {
    fail(
        "{}: the pre-tokenizer '{}' is not supported (supported: Sequence, ByteLevel, Metaspace, "
        "Split)",
        at.where(), type);
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::split(const Piece& piece, std::vector<Piece>& words) const {
  if (steps_.empty()) {
    if (!piece.text.empty()) words.push_back(piece);
    return;
  }
  std::vector<Piece> current{piece}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (const Piece& p : current) apply(step, p, next);
    std::swap(current, next);
  }
  for (Piece& p : current) words.push_back(std::move(p));
}

void PreTokenizer::apply(const Step& step, const Piece& piece, std::vector<Piece>& out) {
  const auto emit = [&](std::string text, bool at_origin) {
    if (!text.empty()) out.push_back({std::move(text), at_origin});
  };
  switch (step.kind) {
    case Step::Kind::kByteLevel: {
      std::string text = piece.text;
      if (step.add_prefix_space && !text.starts_with(' ')) text.insert(0, " ");
      std::vector<std::string_view> parts;
      if (step.use_regex) {
        split_gpt2(text, parts);
      } else {
        parts.push_back(text);
      }
      for (size_t i = 0; i < parts.size(); ++i) {
        std::string mapped;
        for (char c : parts[i]) mapped.append(byte_level_char(static_cast<uint8_t>(c)));
        emit(std::move(mapped), piece.at_origin && i == 0);
      }
      return;
    }
    case Step::Kind::kGpt2Split: {
      std::vector<std::string_view> parts;
      split_gpt2(piece.text, parts);
      for (size_t i = 0; i < parts.size(); ++i)
        emit(std::string(parts[i]), piece.at_origin && i == 0);
      return;
    }
    case Step::Kind::kMetaspace: {
      std::string text = replace_all(piece.text, " ", step.replacement);
      const bool prepend = !text.starts_with(step.replacement) &&
                           (step.prepend_scheme == PrependScheme::kAlways ||
                            (step.prepend_scheme == PrependScheme::kFirst && piece.at_origin));
      if (prepend) text.insert(0, step.replacement);
      if (!step.split) {
        emit(std::move(text), piece.at_origin);
        return;
      }
      // Each replacement character opens a new word (Hugging Face's MergedWithNext).
      size_t begin = 0;
      for (size_t hit = text.find(step.replacement, 1); hit != std::string::npos;
           hit = text.find(step.replacement, hit + step.replacement.size())) {
        emit(text.substr(begin, hit - begin), piece.at_origin && begin == 0);
        begin = hit;
      }
      emit(text.substr(begin), piece.at_origin && begin == 0);
      return;
    }
  }
}

}  // namespace fp4::tokenizer
