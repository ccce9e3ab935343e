#include "tokenizer/decoder.h"

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace fp4::tokenizer {
namespace {

using detail::Json;
using detail::JsonAt;

std::string join(const std::vector<std::string>& tokens, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(tokens[i]);
  }
  return out;
}

size_t char_count(std::string_view text) {
  size_t count = 0;
  for (size_t pos = 0; pos < text.size(); ++count) next_char(text, pos);
  return count;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xHH>" as Hugging Face's ByteFallback reads it (u8::from_str_radix also takes "+H").
int fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
  if (token[3] == '+') return hex_digit(token[4]);
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

Decoder Decoder::from_json(const Json& decoder, const JsonAt& at) {
  Decoder result;
  if (decoder.is_null()) {
    result.join_with_spaces_ = true;
  } else {
    result.add(decoder, at);
  }
  return result;
}

void Decoder::add(const Json& decoder, const JsonAt& at) {
  const std::string type = detail::type_field(decoder, at);
  // After Fuse or ByteLevel the text is one string, which a stream decodes in windows; a
  // pattern of several characters could straddle two windows.
  bool fused = false;
  for (const Step& step : steps_)
    fused = fused || step.kind == Step::Kind::kFuse || step.kind == Step::Kind::kByteLevel;
  Step step;
  if (type == "Sequence") {
    const Json& list = detail::field(decoder, "decoders", at);
    FP4_CHECK(list.is_array(), "{}: expected a list", (at / "decoders").where());
    for (size_t i = 0; i < list.size(); ++i) add(list[i], (at / "decoders")[i]);
    return;
  } else if (type == "Replace") {
    const detail::Pattern pattern = detail::pattern_field(decoder, at);
    FP4_CHECK(!pattern.is_regex,
              "{}: the Replace decoder with a regex pattern ('{}') is not supported", at.where(),
              pattern.text);
    FP4_CHECK(!pattern.text.empty(), "{}: the Replace pattern is empty", at.where());
    FP4_CHECK(!fused || char_count(pattern.text) == 1,
              "{}: a Replace decoder of more than one character ('{}') after Fuse or ByteLevel is "
              "not supported",
              at.where(), pattern.text);
    step = {Step::Kind::kReplace, pattern.text, detail::string_field(decoder, "content", at)};
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    const std::string content = detail::string_field(decoder, "content", at);
    FP4_CHECK(char_count(content) == 1, "{}: expected one character, found '{}'",
              (at / "content").where(), content);
    size_t pos = 0;
    step.strip_char = next_char(content, pos);
    const int64_t start = detail::int_field(decoder, "start", at),
                  stop = detail::int_field(decoder, "stop", at);
    FP4_CHECK(start >= 0 && stop >= 0, "{}: start and stop must be non-negative", at.where());
    step.strip_start = static_cast<size_t>(start);
    step.strip_stop = static_cast<size_t>(stop);
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.pattern = detail::string_or(decoder, "replacement", "\xE2\x96\x81", at);
    FP4_CHECK(char_count(step.pattern) == 1, "{}: expected one character, found '{}'",
              (at / "replacement").where(), step.pattern);
    const bool prefix = detail::bool_or(decoder, "add_prefix_space", true, at);
    step.prepend =
        detail::string_or(decoder, "prepend_scheme", prefix ? "always" : "never", at) != "never";
  } else {
    fail(
        "{}: the decoder '{}' is not supported (supported: Sequence, Replace, ByteFallback, Fuse, "
        "Strip, ByteLevel, Metaspace)",
        at.where(), type);
  }
  steps_.push_back(std::move(step));
}

DecodeResult Decoder::decode(std::vector<std::string> tokens, const DecodeWindow& window) const {
  if (join_with_spaces_) {
    // A window after the first continues the sequence, so it owes the separator before it.
    const std::string separator = !window.first_token && !tokens.empty() ? " " : "";
    return {separator + join(tokens, " "), true};
  }
  DecodeResult result;
  bool fused = false;  // the tokens are now one string: the whole window's text
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kReplace:
        for (std::string& token : tokens) token = replace_all(token, step.pattern, step.content);
        break;
      case Step::Kind::kByteFallback: {
        // A run of byte tokens is decoded as a whole: its text if the bytes are valid UTF-8,
        // else one U+FFFD per byte. A run still open at the window's end may grow.
        std::vector<std::string> out;
        std::string run;
        const auto flush = [&] {
          if (run.empty()) return;
          if (find_invalid_utf8(run) == std::string::npos) {
            out.push_back(run);
          } else {
            for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementChar);
          }
          run.clear();
        };
        for (std::string& token : tokens) {
          const int byte = fallback_byte(token);
          if (byte >= 0) {
            run.push_back(static_cast<char>(byte));
          } else {
            flush();
            out.push_back(std::move(token));
          }
        }
        if (!run.empty() && !window.text_end) result.complete = false;
        flush();
        tokens = std::move(out);
        break;
      }
      case Step::Kind::kFuse:
        tokens = {join(tokens, "")};
        fused = true;
        break;
      case Step::Kind::kStrip:
        for (std::string& token : tokens) {
          std::vector<size_t> starts;  // byte offset of each character, then the end
          std::vector<char32_t> chars;
          for (size_t pos = 0; pos < token.size();) {
            starts.push_back(pos);
            chars.push_back(next_char(token, pos));
          }
          starts.push_back(token.size());
          size_t first = 0, last = chars.size();
          if (!fused || window.text_start) {
            while (first < step.strip_start && first < chars.size() &&
                   chars[first] == step.strip_char)
              ++first;
            // Only strip characters so far: the next window continues the leading strip.
            if (fused && !window.text_end && first == chars.size() && first < step.strip_start)
              result.complete = false;
          }
          if (!fused || window.text_end) {
            while (chars.size() - last < step.strip_stop && last > first &&
                   chars[last - 1] == step.strip_char)
              --last;
          } else if (step.strip_stop > 0 && !chars.empty() && chars.back() == step.strip_char) {
            result.complete = false;  // may turn out to be trailing
          }
          token = token.substr(starts[first], starts[last] - starts[first]);
        }
        break;
      case Step::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& token : tokens) {
          std::string mapped;
          bool all_mapped = true;
          for (size_t pos = 0; pos < token.size() && all_mapped;) {
            const int byte = byte_level_byte(next_char(token, pos));
            all_mapped = byte >= 0;
            mapped.push_back(static_cast<char>(byte));
          }
          bytes.append(all_mapped ? mapped : token);  // Hugging Face keeps such a token's own bytes
        }
        if (!window.text_end && incomplete_utf8_tail(bytes) > 0) result.complete = false;
        tokens = {utf8_lossy(bytes)};
        fused = true;
        break;
      }
      case Step::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = step.prepend && i == 0 && (fused || window.first_token);
          std::string out;
          for (size_t pos = 0; pos < tokens[i].size();) {
            const size_t start = pos;
            next_char(tokens[i], pos);
            const std::string_view c = std::string_view(tokens[i]).substr(start, pos - start);
            if (c != step.pattern) {
              out.append(c);
            } else if (!drop) {
              out.push_back(' ');
            }
          }
          tokens[i] = std::move(out);
        }
        break;
    }
  }
  result.text = join(tokens, "");
  return result;
}

}  // namespace fp4::tokenizer
