#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/check.h"
#include "tests/support/expect_error.h"

namespace fp4::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A scratch directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("fp4serve_st_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes [u64 little-endian length][header][data_bytes zero bytes]; `length` overrides the
  // length field to fake a corrupt file.
  std::string write(const std::string& name, const std::string& header, int64_t data_bytes,
                    std::optional<uint64_t> length = std::nullopt) {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = length.value_or(header.size());
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    out << header;
    out.close();
    // Grow the file without writing: the data section is a hole the reader must never touch.
    fs::resize_file(path, 8 + header.size() + static_cast<uint64_t>(data_bytes));
    return path.string();
  }

  // Reading `path` must fail with a message that names the file and contains every part.
  void expect_error(const std::string& path, std::initializer_list<std::string_view> parts) {
    const std::string message =
        testing::expect_error([&] { read_safetensors_header(path); }, parts);
    EXPECT_NE(message.find(path), std::string::npos) << "for " << path << ": " << message;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, ReadsTheHeaderOnly) {
  // A 2 GiB data section: reading it would be slow and pointless; the header says it all.
  const int64_t big = int64_t{1} << 31;
  const json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"a.weight", {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}}},
      {"b.weight", {{"dtype", "U8"}, {"shape", {big}}, {"data_offsets", {12, 12 + big}}}},
      {"c.scale", {{"dtype", "F32"}, {"shape", json::array()}, {"data_offsets", {12 + big, 16 + big}}}},
  };
  const std::string path = write("model.safetensors", header.dump(), 16 + big);
  const SafetensorsHeader h = read_safetensors_header(path);
  EXPECT_EQ(h.header_bytes, static_cast<int64_t>(header.dump().size()));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.data_bytes(), 16 + big);
  EXPECT_EQ(h.tensors[0].name, "a.weight");
  EXPECT_EQ(h.tensors[0].dtype, "BF16");
  EXPECT_EQ(h.tensors[0].elements(), 6);
  EXPECT_EQ(h.tensors[2].elements(), 1);  // a scalar has shape []
}

TEST_F(SafetensorsTest, TruncatedFilesNameTheFileAndTheExpectation) {
  const json header = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}};
  // The data section stops 4 bytes short of the last tensor.
  expect_error(write("short_data.safetensors", header.dump(), 12),
               {"tensor 'a' ends at byte 16", "only 12 bytes of data", "truncated"});
  // The length field promises more header than the file holds.
  expect_error(write("short_header.safetensors", header.dump(), 0, header.dump().size() + 100),
               {"header length", "truncated"});
  // Not even the 8-byte length.
  const std::string tiny = (dir_ / "tiny.safetensors").string();
  std::ofstream(tiny, std::ios::binary) << "abc";
  expect_error(tiny, {"3 bytes", "at least 8"});
}

TEST_F(SafetensorsTest, BadHeadersSayWhatWasExpected) {
  expect_error(write("json.safetensors", "{\"a\": [", 0), {"not valid JSON"});
  expect_error(write("array.safetensors", "[1, 2]", 0), {"expected a JSON object"});
  expect_error(write("huge.safetensors", "{}", 0, uint64_t{1} << 40), {"limit"});
  json h = {{"a", {{"shape", {4}}, {"data_offsets", {0, 16}}}}};
  expect_error(write("dtype.safetensors", h.dump(), 16), {"tensor 'a'", "dtype"});
  h = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {16, 0}}}}};
  expect_error(write("offsets.safetensors", h.dump(), 16), {"begin <= end"});
  h = {{"a", {{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}}};
  expect_error(write("shape.safetensors", h.dump(), 16), {"shape", "non-negative"});
  // 4 F32 values are 16 bytes, not 12.
  h = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 12}}}}};
  expect_error(write("size.safetensors", h.dump(), 12), {"spans 12 bytes, expected 16"});
}

TEST_F(SafetensorsTest, ShapesTooLargeToCountAreRefused) {
  // 2^32 x 2^32 elements wrap a 64-bit product to 0, which would match data_offsets [0, 0].
  const int64_t two32 = int64_t{1} << 32;
  json h = {{"w", {{"dtype", "BF16"}, {"shape", {two32, two32}}, {"data_offsets", {0, 0}}}}};
  expect_error(write("wrap.safetensors", h.dump(), 0),
               {"tensor 'w'", "[4294967296,4294967296]", "64-bit"});
  // A dtype without a known width is not checked against its bytes, but its shape still is.
  h = {{"w", {{"dtype", "X9"}, {"shape", {two32, two32, 3}}, {"data_offsets", {0, 0}}}}};
  expect_error(write("unknown.safetensors", h.dump(), 0), {"tensor 'w'", "64-bit"});
  // 2^62 elements fit, but not their 2^66 bits.
  const int64_t two31 = int64_t{1} << 31;
  h = {{"w", {{"dtype", "BF16"}, {"shape", {two31, two31}}, {"data_offsets", {0, 0}}}}};
  expect_error(write("bits.safetensors", h.dump(), 0),
               {"tensor 'w'", "BF16", "[2147483648,2147483648]", "4611686018427387904 elements",
                "16 bits", "64-bit"});
  // A zero dimension makes an empty tensor, however large the other dimensions are.
  h = {{"w", {{"dtype", "BF16"}, {"shape", {two32, two32, 0}}, {"data_offsets", {0, 0}}}}};
  const SafetensorsHeader empty = read_safetensors_header(write("empty.safetensors", h.dump(), 0));
  ASSERT_EQ(empty.tensors.size(), 1u);
  EXPECT_EQ(empty.tensors[0].elements(), 0);
  // Tensors built by hand get the same check.
  SafetensorsTensor t;
  t.name = "hand";
  t.shape = {two32, two32};
  testing::expect_error([&] { t.elements(); }, {"tensor 'hand'", "[4294967296,4294967296]"});
}

TEST_F(SafetensorsTest, ParameterSumsThatOverflowAreRefused) {
  // Two tensors of an unknown dtype, each 2^62 elements in 0 bytes: the class total would wrap.
  ModelConfig config;
  const int64_t two31 = int64_t{1} << 31;
  const json h = {
      {"a.weight", {{"dtype", "X9"}, {"shape", {two31, two31}}, {"data_offsets", {0, 0}}}},
      {"b.weight", {{"dtype", "X9"}, {"shape", {two31, two31}}, {"data_offsets", {0, 0}}}},
  };
  const std::string path = write("model.safetensors", h.dump(), 0);
  EXPECT_EQ(read_safetensors_header(path).tensors.size(), 2u);
  const std::string message = testing::expect_error(
      [&] { scan_checkpoint(dir_.string(), config); }, {"tensor 'b.weight'", "X9", "64-bit"});
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST_F(SafetensorsTest, ScanGroupsACheckpointByClass) {
  ModelConfig config;
  config.num_kv_heads = 2;
  config.num_index_heads = 2;
  config.num_experts = 4;
  auto entry = [](const char* dtype, int64_t n, int64_t& offset) {
    const int64_t bytes = n * dtype_bits(dtype) / 8;
    json e = {{"dtype", dtype}, {"shape", {n}}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    return e;
  };
  int64_t off = 0;
  json a;
  a["model.embed_tokens.weight"] = entry("BF16", 100, off);
  a["model.layers.0.self_attn.q_proj.weight"] = entry("F8_E4M3", 64, off);
  a["model.layers.0.self_attn.k_proj.weight"] = entry("F8_E4M3", 32, off);
  write("model-00001-of-00002.safetensors", a.dump(), off);
  off = 0;
  json b;
  for (int e = 0; e < 4; ++e) {
    const std::string name = "model.layers.0.block_sparse_moe.experts." + std::to_string(e);
    b[name + ".w1.weight"] = entry("U8", 40, off);
  }
  b["model.mtp.layers.0.eh_proj.weight"] = entry("BF16", 10, off);
  write("model-00002-of-00002.safetensors", b.dump(), off);
  std::ofstream(dir_ / "config.json") << "{}";  // other files are ignored

  const WeightBreakdown w = scan_checkpoint(dir_.string(), config);
  EXPECT_EQ(w.total_bytes(), 200 + 64 + 32 + 160 + 20);
  EXPECT_EQ(w.bytes_of(WeightClass::kEmbedding), 200);
  EXPECT_EQ(w.bytes_of(WeightClass::kAttention), 96);
  EXPECT_EQ(w.bytes_of(WeightClass::kRoutedExperts), 160);
  EXPECT_EQ(w.bytes_of(WeightClass::kMtp), 20);
  // tp 2, ep 2: embedding and q halved, k one of two heads, two of four experts, MTP not loaded.
  EXPECT_EQ(weights_bytes_per_gpu(w, {2, 2}), 100 + 32 + 16 + 80);
  EXPECT_THROW(scan_checkpoint((dir_ / "absent").string(), config), Error);
}

}  // namespace
}  // namespace fp4::model
