#include "model/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/mxfp8.h"
#include "formats/nvfp4.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

namespace fp4::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;

struct Stored {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Stored f32_scalar(std::string name, float v, std::vector<int64_t> shape = {}) {
  return {std::move(name), "F32", std::move(shape), bytes_of(std::vector<float>{v})};
}

// Random bytes: every code of the 8- and 16-bit formats, NaNs and infinities included.
std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A weight quantized in the test, and what the format's block decoder makes of it.
struct Quantized {
  std::vector<Stored> tensors;
  std::vector<float> expected;
};

// NVFP4 as ModelOpt stores it: codes [rows, packed_cols] with the even element in the low
// nibble, E4M3 scales [rows, ceil(cols/16)], the F32 global scale. A partial last block is
// quantized as if zero-padded to 16, and only its first ceil(n/2) bytes are stored.
Quantized nvfp4_weight(const std::string& module, int64_t rows, int64_t cols, bool pad_blocks,
                       std::mt19937_64& rng) {
  const auto x = testing::random_floats(static_cast<size_t>(rows * cols),
                                        testing::Distribution::kBlockScaled, rng);
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float g = nvfp4_global_scale_for_amax(amax);
  const int64_t blocks = ceil_div(cols, 16);
  const int64_t packed_cols = pad_blocks ? 8 * blocks : ceil_div(cols, 2);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * packed_cols));
  std::vector<uint8_t> scales(static_cast<size_t>(rows * blocks));
  Quantized q;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n = std::min<int64_t>(16, cols - 16 * b);
      float in[16] = {}, out[16];
      uint8_t codes[8];
      std::copy_n(&x[static_cast<size_t>(r * cols + 16 * b)], n, in);
      const uint8_t s = nvfp4_quantize_block(in, g, codes);
      scales[static_cast<size_t>(r * blocks + b)] = s;
      std::copy_n(codes, ceil_div(n, 2), &packed[static_cast<size_t>(r * packed_cols + 8 * b)]);
      nvfp4_dequantize_block(codes, s, g, out);
      q.expected.insert(q.expected.end(), out, out + n);
    }
  }
  q.tensors = {{module + ".weight", "U8", {rows, packed_cols}, packed},
               {module + ".weight_scale", "F8_E4M3", {rows, blocks}, scales},
               f32_scalar(module + ".weight_scale_2", g, {1}),
               f32_scalar(module + ".input_scale", 0.25f)};
  return q;
}

// MXFP8: E4M3 values [rows, cols], UE8M0 scales [rows, ceil(cols/32)] under `scale_name`.
Quantized mxfp8_weight(const std::string& module, int64_t rows, int64_t cols,
                       const std::string& scale_name, const std::string& scale_dtype,
                       std::mt19937_64& rng) {
  const auto x = testing::random_floats(static_cast<size_t>(rows * cols),
                                        testing::Distribution::kBlockScaled, rng);
  const int64_t blocks = ceil_div(cols, 32);
  std::vector<uint8_t> values(static_cast<size_t>(rows * cols));
  std::vector<uint8_t> scales(static_cast<size_t>(rows * blocks));
  Quantized q;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n = std::min<int64_t>(32, cols - 32 * b);
      float in[32] = {}, out[32];
      uint8_t codes[32];
      std::copy_n(&x[static_cast<size_t>(r * cols + 32 * b)], n, in);
      const uint8_t s = mxfp8_quantize_block(in, codes);
      scales[static_cast<size_t>(r * blocks + b)] = s;
      std::copy_n(codes, n, &values[static_cast<size_t>(r * cols + 32 * b)]);
      mxfp8_dequantize_block(codes, s, out);
      q.expected.insert(q.expected.end(), out, out + n);
    }
  }
  q.tensors = {{module + ".weight", "F8_E4M3", {rows, cols}, values},
               {module + "." + scale_name, scale_dtype, {rows, blocks}, scales}};
  return q;
}

// Every comparison is bit for bit: the loader and the expectation run the same decoder on the
// same bytes, so any difference is a layout or indexing error, never rounding.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(float_to_bits(got[i]), float_to_bits(want[i]))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fp4serve_ckpt_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // [u64 little-endian header length][JSON header][data back to back].
  std::string write(const std::string& file, const std::vector<Stored>& tensors) {
    json header = {{"__metadata__", {{"format", "pt"}}}};
    std::string data;
    for (const Stored& t : tensors) {
      header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape},
                        {"data_offsets", {data.size(), data.size() + t.data.size()}}};
      data.append(t.data.begin(), t.data.end());
    }
    const std::string text = header.dump();
    const fs::path path = dir_ / file;
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((text.size() >> (8 * i)) & 0xFF));
    out << text << data;
    return path.string();
  }
  std::string write_index(const json& weight_map, const json& metadata = json::object()) {
    const fs::path path = dir_ / "model.safetensors.index.json";
    std::ofstream(path) << json{{"metadata", metadata}, {"weight_map", weight_map}}.dump();
    return path.string();
  }
  Checkpoint open(CheckpointOptions options = {}) { return Checkpoint(dir_.string(), options); }

  fs::path dir_;
};

TEST_F(CheckpointTest, DenseDtypesLoadBitExactly) {
  auto rng = testing::seeded_rng(1);
  const auto f32 = random_bytes(7 * 5 * 4, rng), bf16 = random_bytes(3 * 33 * 2, rng),
             f16 = random_bytes(65 * 2, rng);
  write("model.safetensors", {{"a.weight", "F32", {7, 5}, f32}, {"b.weight", "BF16", {3, 33}, bf16},
                              {"c.weight", "F16", {65}, f16}, f32_scalar("d", 1.5f)});
  const Checkpoint ck = open();
  std::vector<float> want(35);
  std::memcpy(want.data(), f32.data(), f32.size());
  expect_same_bits(ck.load_f32("a.weight", {7, 5}), want, "F32");
  auto decode16 = [](const std::vector<uint8_t>& b, float (*decode)(uint16_t)) {
    std::vector<float> out;
    for (size_t i = 0; i < b.size(); i += 2) out.push_back(decode(uint16_t(b[i] | b[i + 1] << 8)));
    return out;
  };
  expect_same_bits(ck.load_f32("b.weight", {3, 33}), decode16(bf16, bf16_decode), "BF16");
  expect_same_bits(ck.load_f32("c.weight", {65}), decode16(f16, fp16_decode), "F16");
  expect_same_bits(ck.load_f32("d", {}), {1.5f}, "F32 scalar");
  EXPECT_EQ(ck.describe("a.weight"), "f32");
  EXPECT_EQ(ck.describe("b.weight"), "bf16");
  EXPECT_EQ(ck.describe("c.weight"), "f16");
}

TEST_F(CheckpointTest, Nvfp4MatchesTheBlockDecoderIncludingPartialBlocks) {
  auto rng = testing::seeded_rng(2);
  std::vector<Stored> all;
  std::vector<std::pair<std::vector<int64_t>, std::vector<float>>> cases;
  // Odd inner dims (a partial block, a half-used last byte); the 96 x 1040 case is large
  // enough to be split over threads.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {5, 64}, {5, 37}, {3, 19}, {4, 1}, {2, 200}, {96, 1040}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [rows, cols] = shapes[i];
    Quantized q = nvfp4_weight(fmt::format("m{}", i), rows, cols, false, rng);
    all.insert(all.end(), q.tensors.begin(), q.tensors.end());
    cases.push_back({{rows, cols}, q.expected});
  }
  // Codes padded to whole blocks: [3, 24] bytes would fit any inner dim from 33 to 48.
  Quantized padded = nvfp4_weight("p", 3, 37, true, rng);
  all.insert(all.end(), padded.tensors.begin(), padded.tensors.end());
  write("model.safetensors", all);
  const Checkpoint ck = open();
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = fmt::format("m{}.weight", i);
    expect_same_bits(ck.load_f32(name, cases[i].first), cases[i].second, name);
    EXPECT_EQ(ck.describe(name), "nvfp4");
    EXPECT_EQ(ck.input_scale(name), 0.25f);
  }
  EXPECT_EQ(ck.input_scale("d.weight"), std::nullopt);
  expect_error([&] { ck.load_f32("p.weight", {3, 37}); },
               {"tensor 'p.weight'", "stored as U8 [3, 24] with scales [3, 3]", "expected [3, 37]",
                "ceil(n/2)"});
  // 37 values fill 19 bytes (the last one half); 39 would need 20. (38 also fills 19 bytes:
  // the format cannot tell it from 37.)
  expect_error([&] { ck.load_f32("m1.weight", {5, 39}); },
               {"tensor 'm1.weight': shape [5, 38] (NVFP4, stored as U8 [5, 19]",
                "expected [5, 39]"});
}

TEST_F(CheckpointTest, Nvfp4KnownBytesPutTheEvenElementInTheLowNibble) {
  // 0xF2: low nibble 0x2 = +1.0 (element 0), high nibble 0xF = -6.0; scale 0x38 = 1.0; g = 0.5.
  write("model.safetensors", {{"w.weight", "U8", {1, 1}, {0xF2}},
                              {"w.weight_scale", "F8_E4M3", {1, 1}, {0x38}},
                              f32_scalar("w.weight_scale_2", 0.5f)});
  expect_same_bits(open().load_f32("w.weight", {1, 2}), {0.5f, -3.0f}, "0xF2");
}

TEST_F(CheckpointTest, Mxfp8AndPerTensorFp8MatchTheirDecoders) {
  auto rng = testing::seeded_rng(3);
  Quantized a = mxfp8_weight("a", 5, 64, "weight_scale_inv", "U8", rng);
  Quantized b = mxfp8_weight("b", 3, 45, "weight_scale", "F8_E8M0", rng);
  Quantized c = mxfp8_weight("c", 64, 1056, "weight_scale_inv", "U8", rng);  // threaded
  const auto codes = random_bytes(6 * 10, rng);
  std::vector<Stored> all = {{"d.weight", "F8_E4M3", {6, 10}, codes},
                             f32_scalar("d.weight_scale", 0.375f),
                             {"e.weight", "F8_E4M3", {6, 10}, codes},
                             f32_scalar("e.weight_scale", 3.0f, {1})};
  for (Quantized* q : {&a, &b, &c}) all.insert(all.end(), q->tensors.begin(), q->tensors.end());
  write("model.safetensors", all);
  const Checkpoint ck = open();
  expect_same_bits(ck.load_f32("a.weight", {5, 64}), a.expected, "MXFP8 U8 scales");
  expect_same_bits(ck.load_f32("b.weight", {3, 45}), b.expected, "MXFP8 F8_E8M0, 45 columns");
  expect_same_bits(ck.load_f32("c.weight", {64, 1056}), c.expected, "MXFP8 threaded");
  EXPECT_EQ(ck.describe("b.weight"), "mxfp8");
  for (const auto& [name, s] : {std::pair{"d.weight", 0.375f}, std::pair{"e.weight", 3.0f}}) {
    std::vector<float> want;
    for (uint8_t code : codes) {
      const float v = e4m3_decode(code);
      want.push_back(is_nan(v) ? quiet_nan() : v * s);
    }
    expect_same_bits(ck.load_f32(name, {6, 10}), want, name);
    EXPECT_EQ(ck.describe(name), "fp8");
  }
}

TEST_F(CheckpointTest, ShardedCheckpointsLoadThroughTheIndex) {
  auto rng = testing::seeded_rng(4);
  const auto a = random_bytes(4 * 8 * 2, rng), b = random_bytes(16 * 4, rng);
  write("model-00001-of-00002.safetensors", {{"x.weight", "BF16", {4, 8}, a}});
  write("model-00002-of-00002.safetensors", {{"y.weight", "F32", {16}, b}, f32_scalar("z", 2.0f)});
  write_index({{"x.weight", "model-00001-of-00002.safetensors"},
               {"y.weight", "model-00002-of-00002.safetensors"},
               {"z", "model-00002-of-00002.safetensors"}}, {{"total_size", 132}});
  write("stray.safetensors", {f32_scalar("unlisted", 1.0f)});  // not named by the index
  const Checkpoint ck = open();
  EXPECT_EQ(ck.names(), (std::vector<std::string_view>{"x.weight", "y.weight", "z"}));
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.total_bytes(), 132);
  ASSERT_NE(ck.index_metadata(), nullptr);
  EXPECT_EQ(ck.index_metadata()->at("total_size"), 132);
  EXPECT_EQ(ck.find("unlisted"), nullptr);
  std::vector<float> want(16);
  std::memcpy(want.data(), b.data(), b.size());
  expect_same_bits(ck.load_f32("y.weight", {16}), want, "second shard");
  EXPECT_EQ(ck.load_f32("x.weight", {4, 8}).size(), 32u);
}

TEST_F(CheckpointTest, WithoutAnIndexEverySafetensorsFileIsOpened) {
  write("a.safetensors", {f32_scalar("p", 1.0f)});
  write("b.safetensors", {f32_scalar("q", 2.0f)});
  const Checkpoint ck = open();
  EXPECT_EQ(ck.names(), (std::vector<std::string_view>{"p", "q"}));
  EXPECT_EQ(ck.index_metadata(), nullptr);
  EXPECT_EQ(ck.load_f32("q", {})[0], 2.0f);
}

TEST_F(CheckpointTest, TensorBytesAreViewsIntoTheMapping) {
  auto rng = testing::seeded_rng(5);
  const auto a = random_bytes(24, rng), b = random_bytes(40, rng);
  write("model.safetensors", {{"a", "U8", {24}, a}, {"b", "U8", {40}, b}});
  const Checkpoint ck = open();
  const TensorRef& ra = ck.get("a");
  EXPECT_EQ(ck.get("a").bytes.data(), ra.bytes.data());
  EXPECT_EQ(ck.find("a"), &ra);
  // Both tensors lie in one contiguous mapping, at their offsets in the file ("a" is first).
  EXPECT_EQ(ck.get("b").bytes.data() - ra.bytes.data(), 24);
  EXPECT_TRUE(std::equal(ra.bytes.begin(), ra.bytes.end(), a.begin(), a.end()));
  EXPECT_EQ(ra.file, (dir_ / "model.safetensors").string());
}

TEST_F(CheckpointTest, LookupAndShapeErrorsNameTheTensorAndTheExpectation) {
  auto rng = testing::seeded_rng(6);
  const Quantized n = nvfp4_weight("n", 4, 40, false, rng);
  const std::string full = "language_model.model.layers.0.mlp.down_proj.weight";
  std::vector<Stored> all = {
      {full, "F32", {3, 4}, std::vector<uint8_t>(48)},
      {"w.weight", "F64", {2}, std::vector<uint8_t>(16)},
      {"q.weight", "U8", {4, 8}, std::vector<uint8_t>(32)},
      {"f.weight", "F8_E4M3", {4, 64}, std::vector<uint8_t>(256)},
      {"f.weight_scale_inv", "U8", {4, 4}, std::vector<uint8_t>(16)},
      {"g.weight", "BF16", {2}, std::vector<uint8_t>(4)}, f32_scalar("g.weight_scale", 1.0f)};
  all.insert(all.end(), n.tensors.begin(), n.tensors.end());
  const std::string file = write("model.safetensors", all);
  const Checkpoint ck = open();
  expect_error([&] { ck.get("model.layers.0.mlp.down_proj.weight"); },
               {"tensor 'model.layers.0.mlp.down_proj.weight' not found", dir_.string(),
                "did you mean '" + full + "'"});
  expect_error([&] { ck.load_f32("language_model.model.layers.0.mlp.down_prj.weight", {3, 4}); },
               {"down_prj", "did you mean '" + full + "'"});
  expect_error([&] { ck.load_f32(full, {4, 3}); },
               {"tensor '" + full + "': shape [3, 4] in " + file + ", expected [4, 3]"});
  expect_error([&] { ck.load_f32("w.weight", {2}); },
               {"tensor 'w.weight'", "F64 [2]", "unsupported weight dtype F64",
                "expected F32, BF16"});
  expect_error([&] { ck.describe("q.weight"); },
               {"tensor 'q.weight'", "U8 [4, 8]", "'q.weight_scale' (F8_E4M3 of shape",
                "both are"});
  expect_error([&] { ck.load_f32("f.weight", {4, 64}); },
               {"tensor 'f.weight'", "'f.weight_scale_inv' is U8 [4, 4]",
                "MXFP8 expects U8 [4, 2]"});
  expect_error([&] { ck.load_f32("f.weight_scale_inv", {4, 4}); },
               {"tensor 'f.weight_scale_inv'", "only a '<module>.weight' tensor", "expected F32"});
  expect_error([&] { ck.load_f32("g.weight", {2}); },
               {"tensor 'g.weight'", "scale 'g.weight_scale'", "expected no scales"});
  expect_error([&] { ck.load_f32("n.weight", {4, 48}); },
               {"tensor 'n.weight': shape [4, 40] (NVFP4, stored as U8 [4, 20] with scales [4, 3])",
                "expected [4, 48]"});
  expect_same_bits(ck.load_f32("n.weight", {4, 40}), n.expected, "NVFP4 beside broken tensors");
}

TEST_F(CheckpointTest, IndexInconsistenciesNameTheTensorTheShardAndTheIndex) {
  const std::vector<Stored> one = {f32_scalar("a", 1.0f)};
  write("s1.safetensors", one);
  std::string index = write_index({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  expect_error([&] { open(); },
               {index, (dir_ / "s2.safetensors").string(), "tensor 'b'", "missing"});
  write("s2.safetensors", one);  // "b" is not in the shard the index names; "a" is in both
  expect_error([&] { open(); }, {"tensor 'a'", "s1.safetensors", "s2.safetensors", index});
  write("s2.safetensors", {f32_scalar("c", 3.0f)});
  expect_error([&] { open(); }, {index, "tensor 'b'", "s2.safetensors", "does not hold it"});
  write("s2.safetensors", {f32_scalar("b", 2.0f), f32_scalar("c", 3.0f)});
  expect_error([&] { open(); }, {index, "tensor 'c'", "not in the weight_map"});
  write_index({{"a", "../s1.safetensors"}});
  expect_error([&] { open(); }, {index, "weight_map[\"a\"]", "expected a file inside"});
  std::ofstream(index) << "{\"weight_map\": [";
  expect_error([&] { open(); }, {index, "not valid JSON"});
}

TEST_F(CheckpointTest, BrokenFilesAndDirectoriesAreRefused) {
  expect_error([&] { open(); }, {dir_.string(), "model.safetensors.index.json", "found none"});
  expect_error([&] { Checkpoint((dir_ / "nope").string()); }, {"nope", "not a directory"});
  write("a.safetensors", {f32_scalar("p", 1.0f)});
  write("b.safetensors", {f32_scalar("p", 2.0f)});
  expect_error([&] { open(); }, {"tensor 'p'", "a.safetensors", "b.safetensors"});
  fs::remove(dir_ / "b.safetensors");
  fs::resize_file(dir_ / "a.safetensors", fs::file_size(dir_ / "a.safetensors") - 2);
  expect_error([&] { open(); }, {"a.safetensors", "tensor 'p'", "truncated"});
  const std::string bad = (dir_ / "a.safetensors").string();
  std::ofstream out(bad, std::ios::binary);
  out.write("\x05\0\0\0\0\0\0\0{\"p\":", 13);
  out.close();
  expect_error([&] { open(); }, {bad, "not valid JSON"});
}

TEST_F(CheckpointTest, ProgressBarIsDrawnWhenForcedAndEndsWithANewline) {
  EXPECT_EQ(progress_line("loading x", 50'000'000, 200'000'000, 2.0),
            "loading x: 50.0 / 200.0 MB   25%  25 MB/s  ETA 0:06");
  EXPECT_EQ(progress_line("l", 12'340'000'000, 20'000'000'000, 10.0),
            "l: 12.34 / 20.00 GB   62%  1234 MB/s  ETA 0:06");
  EXPECT_EQ(progress_line("l", 60'000'000, 30'000'000, 1.0).find("ETA"), std::string::npos)
      << "no ETA once done";
  EXPECT_EQ(progress_line("big", 1'000'000, 7'201'000'000, 1.0), "big: 1.0 / 7201.0 MB    0%  1 MB/s  ETA 120:00");
  write("model.safetensors",
        {{"a", "F32", {64}, std::vector<uint8_t>(256)}, f32_scalar("b", 1.0f)});
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  EXPECT_FALSE(progress_enabled(ProgressMode::kAuto, int64_t{1} << 40, log));  // not a terminal
  EXPECT_FALSE(progress_enabled(ProgressMode::kNever, int64_t{1} << 40, log));
  {
    const Checkpoint quiet = open({.progress = ProgressMode::kAuto, .progress_stream = log});
    quiet.load_f32("a", {64});
  }
  EXPECT_EQ(std::ftell(log), 0);
  {
    const Checkpoint ck = open({.progress = ProgressMode::kAlways, .progress_stream = log});
    ck.load_f32("a", {64});
    ck.load_f32("b", {});
  }
  std::string text(static_cast<size_t>(std::ftell(log)), '\0');
  std::rewind(log);
  ASSERT_EQ(std::fread(text.data(), 1, text.size(), log), text.size());
  std::fclose(log);
  EXPECT_NE(text.find("\rloading " + dir_.string() + ": 0.0 / 0.0 MB  100%"), std::string::npos)
      << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

}  // namespace
}  // namespace fp4::model
