#include "model/safetensors_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "model/safetensors.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

namespace fp4::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint64_t header_length(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  return n;
}

// Tensors whose bytes live in `storage`, so the spans stay valid for the test's lifetime.
struct Fixture {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<SafetensorsWriteTensor> tensors;
};

// Random dtypes, ranks 0-3 (a scalar included) and dims 0-6 (so empty tensors appear too),
// filled with random bytes.
Fixture random_tensors(std::mt19937_64& rng) {
  static const std::pair<const char*, int> kDtypes[] = {
      {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F8_E4M3", 1}, {"U8", 1}, {"I32", 4}, {"I64", 8}};
  Fixture f;
  const int n = std::uniform_int_distribution<int>(1, 9)(rng);
  for (int i = 0; i < n; ++i) {
    const auto [dtype, size] = kDtypes[rng() % std::size(kDtypes)];
    std::vector<int64_t> shape(rng() % 4);
    int64_t bytes = size;
    for (int64_t& d : shape) bytes *= (d = static_cast<int64_t>(rng() % 7));
    std::vector<uint8_t> data(static_cast<size_t>(bytes));
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    f.storage.push_back(std::move(data));
    f.tensors.push_back({"layers." + std::to_string(i) + std::string(rng() % 5, 'x') + ".weight",
                         dtype, shape, {}});
  }
  for (size_t i = 0; i < f.tensors.size(); ++i) f.tensors[i].data = f.storage[i];
  return f;
}

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("fp4serve_stw_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

TEST_F(SafetensorsWriterTest, RoundTripsRandomTensorsThroughTheReader) {
  auto rng = testing::seeded_rng(1);
  for (int round = 0; round < 20; ++round) {
    const Fixture f = random_tensors(rng);
    const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                         {"round", std::to_string(round)}};
    const std::string path = (dir_ / "model.safetensors").string();
    write_safetensors(path, f.tensors, metadata);

    const SafetensorsHeader h = read_safetensors_header(path);
    ASSERT_EQ(h.tensors.size(), f.tensors.size());
    const std::string file = read_bytes(path);
    const int64_t data_start = 8 + h.header_bytes;
    EXPECT_EQ(data_start % 8, 0) << "the data section must start 8-byte aligned";
    int64_t end = 0;
    for (const SafetensorsWriteTensor& want : f.tensors) {
      const auto got = std::find_if(h.tensors.begin(), h.tensors.end(),
                                    [&](const SafetensorsTensor& t) { return t.name == want.name; });
      ASSERT_NE(got, h.tensors.end()) << want.name;
      EXPECT_EQ(got->dtype, want.dtype);
      EXPECT_EQ(got->shape, want.shape);
      // Laid out back to back in the order given: each tensor starts where the previous ended.
      EXPECT_EQ(got->begin, end) << want.name;
      end = got->end;
      const auto first = file.begin() + data_start + got->begin;
      const std::vector<uint8_t> bytes(first, first + got->bytes());
      EXPECT_TRUE(std::ranges::equal(bytes, want.data)) << want.name;
    }
    EXPECT_EQ(h.file_bytes, data_start + end) << "no bytes after the last tensor";
    const json header = json::parse(file.substr(8, static_cast<size_t>(h.header_bytes)));
    EXPECT_EQ(header["__metadata__"], json(metadata));
    EXPECT_EQ(files(), std::vector<std::string>{"model.safetensors"}) << "no .tmp left";
  }
}

TEST_F(SafetensorsWriterTest, PadsTheHeaderWithSpacesToEveryAlignment) {
  // Names of 1-16 characters move the JSON length through every residue mod 8.
  std::set<uint64_t> residues;
  const std::vector<uint8_t> data(4, 0x3F);
  for (int len = 1; len <= 16; ++len) {
    const SafetensorsWriteTensor t{std::string(static_cast<size_t>(len), 'w'), "F32", {1}, data};
    const json unpadded = {{t.name, {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
    residues.insert(unpadded.dump().size() % 8);
    const fs::path path = dir_ / "a.safetensors";
    write_safetensors(path.string(), std::span(&t, 1));
    const std::string file = read_bytes(path);
    const uint64_t n = header_length(file);
    EXPECT_EQ((8 + n) % 8, 0u);
    const std::string header = file.substr(8, n);
    const size_t json_end = header.find_last_not_of(' ') + 1;
    EXPECT_LT(n - json_end, 8u) << "at most 7 spaces of padding";
    EXPECT_EQ(json::parse(header.substr(0, json_end)), unpadded);
    EXPECT_EQ(file.size(), 8 + n + 4);
  }
  EXPECT_EQ(residues.size(), 8u) << "the names did not reach every residue";
}

TEST_F(SafetensorsWriterTest, ReplacesAnExistingFileAndAStaleTemporary) {
  const std::vector<uint8_t> data = {1, 2, 3, 4};
  const SafetensorsWriteTensor t{"x", "U8", {4}, data};
  const fs::path path = dir_ / "m.safetensors";
  std::ofstream(path) << "old contents";
  std::ofstream(dir_ / "m.safetensors.tmp") << "left by a run that was killed";
  write_safetensors(path.string(), std::span(&t, 1));
  EXPECT_EQ(files(), std::vector<std::string>{"m.safetensors"});
  EXPECT_EQ(read_safetensors_header(path.string()).tensors.at(0).name, "x");
}

TEST_F(SafetensorsWriterTest, RefusesTensorsThatDisagreeWithTheirDtypeAndShape) {
  const std::vector<uint8_t> data(12, 0);
  const std::string path = (dir_ / "bad.safetensors").string();
  auto refuse = [&](std::vector<SafetensorsWriteTensor> tensors,
                    std::initializer_list<std::string_view> parts) {
    const std::string message = testing::expect_error([&] { write_safetensors(path, tensors); },
                                                      parts);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_TRUE(files().empty()) << "nothing written, not even a .tmp";
  };
  refuse({{"a", "F32", {2, 2}, data}}, {"tensor 'a'", "12 bytes", "expected 16"});
  refuse({{"a", "BF16", {6}, data}, {"a", "BF16", {6}, data}}, {"'a'", "twice"});
  refuse({{"a", "F4", {24}, data}}, {"'a'", "\"F4\"", "whole bytes"});
  refuse({{"a", "Q8", {12}, data}}, {"'a'", "\"Q8\""});
  refuse({{"__metadata__", "U8", {12}, data}}, {"__metadata__", "reserved"});
  refuse({{"a", "U8", {-12}, data}}, {"'a'", "-12"});
}

TEST_F(SafetensorsWriterTest, NamesThePathWhenTheFileCannotBeCreated) {
  const std::vector<uint8_t> data(4, 0);
  const SafetensorsWriteTensor t{"a", "F32", {1}, data};
  const std::string path = (dir_ / "no_such_dir" / "m.safetensors").string();
  testing::expect_error([&] { write_safetensors(path, std::span(&t, 1)); },
                        {path, "cannot create", "No such file or directory"});
}

TEST_F(SafetensorsWriterTest, AFullDiskLeavesNoFileUnderTheFinalName) {
  // The temporary name is a link to /dev/full, whose writes fail with ENOSPC like a full disk.
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "this system has no /dev/full";
  const std::vector<uint8_t> data(1 << 16, 7);
  const SafetensorsWriteTensor t{"a", "U8", {1 << 16}, data};
  const fs::path path = dir_ / "m.safetensors";
  fs::create_symlink("/dev/full", dir_ / "m.safetensors.tmp");
  testing::expect_error([&] { write_safetensors(path.string(), std::span(&t, 1)); },
                        {path.string(), "cannot write", "No space left on device"});
  EXPECT_TRUE(files().empty()) << "the final name never appears and the temporary is removed";
}

TEST_F(SafetensorsWriterTest, AFailedRenameRemovesTheTemporary) {
  const fs::path path = dir_ / "m.safetensors";
  fs::create_directories(path / "occupied");  // rename() cannot replace a non-empty directory
  testing::expect_error([&] { write_text_file_atomically(path.string(), "{}"); },
                        {path.string(), "cannot rename"});
  EXPECT_EQ(files(), std::vector<std::string>{"m.safetensors"});
  EXPECT_TRUE(fs::is_directory(path));
}

}  // namespace
}  // namespace fp4::model
