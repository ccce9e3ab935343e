// tokenizer_tool <tokenizer.json> <inputs.json>: encodes and decodes with fp4serve's tokenizer
// and prints JSON lines, for comparison with Hugging Face tokenizers (hf_agreement_test.py).
//
// inputs.json is a list of strings, or {"texts": [...], "ids": [[...], ...], "gpt2_split": [...]}.
// Output: one line describing the tokenizer, then one line per text (its ids with and without
// special tokens, and the decoding of the ids with special tokens), then one line per id list
// (its decoding), then one line per gpt2_split string (its pieces under the GPT-2 regex). Every
// decoding is given whole, with and without special tokens, and streamed through
// IncrementalDetokenizer.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace {

using fp4::tokenizer::Tokenizer;
using nlohmann::json;

std::string stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  fp4::tokenizer::IncrementalDetokenizer detokenizer(tokenizer, skip);
  std::string text;
  for (int32_t id : ids) text += detokenizer.push(id);
  return text + detokenizer.finish();
}

void add_decodings(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, json& line) {
  line["decoded"] = tokenizer.decode(ids, false);
  line["decoded_skip"] = tokenizer.decode(ids, true);
  line["streamed"] = stream(tokenizer, ids, false);
  line["streamed_skip"] = stream(tokenizer, ids, true);
}

void print(const json& line) {
  std::cout << line.dump(-1, ' ', false, json::error_handler_t::strict) << '\n';
}

int run(int argc, char** argv) {
  FP4_CHECK(argc == 3, "usage: {} <tokenizer.json> <inputs.json>",
            argc > 0 ? argv[0] : "tokenizer_tool");
  const Tokenizer tokenizer = Tokenizer::from_file(argv[1]);
  std::ifstream in(argv[2]);
  FP4_CHECK(in.good(), "{}: cannot open the file", argv[2]);
  const json inputs = json::parse(in);
  const json texts = inputs.is_array() ? inputs : inputs.value("texts", json::array());
  const json id_lists = inputs.is_object() ? inputs.value("ids", json::array()) : json::array();

  print({{"vocab_size", tokenizer.vocab_size()},
         {"bos_id", tokenizer.bos_id()},
         {"eos_id", tokenizer.eos_id()},
         {"add_bos_token", tokenizer.add_bos_token()}});
  for (const json& text : texts) {
    const std::string s = text.get<std::string>();
    json line;
    line["ids"] = tokenizer.encode(s, false);
    const std::vector<int32_t> with_special = tokenizer.encode(s, true);
    line["ids_special"] = with_special;
    add_decodings(tokenizer, with_special, line);
    print(line);
  }
  for (const json& ids : id_lists) {
    json line;
    add_decodings(tokenizer, ids.get<std::vector<int32_t>>(), line);
    print(line);
  }
  const json splits =
      inputs.is_object() ? inputs.value("gpt2_split", json::array()) : json::array();
  for (const json& text : splits) {
    const std::string s = text.get<std::string>();
    std::vector<std::string_view> pieces;
    fp4::tokenizer::split_gpt2(s, pieces);
    print({{"pieces", std::vector<std::string>(pieces.begin(), pieces.end())}});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_tool: %s\n", e.what());
    return 1;
  }
}
