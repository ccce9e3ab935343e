#include "model/safetensors.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "core/check.h"

namespace fp4::model {
namespace {

using nlohmann::json;

// The format's own cap on the JSON header; anything larger is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::vector<int64_t> read_int_array(const json& v, const std::string& path,
                                    const std::string& name, const char* field) {
  FP4_CHECK(v.is_array(), "{}: tensor '{}': {} is {}, expected a list of non-negative integers",
            path, name, field, v.dump());
  std::vector<int64_t> out;
  for (const json& e : v) {
    FP4_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0,
              "{}: tensor '{}': {} holds {}, expected non-negative integers", path, name, field,
              e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// The product of the dimensions, or nullopt when it does not fit in an int64: a corrupt or
// hostile header must not wrap to a small count that then matches its data_offsets.
std::optional<int64_t> element_count(const std::vector<int64_t>& shape) {
  // A zero dimension makes the product 0 even when the other dimensions alone would overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) { return json(shape).dump(); }

SafetensorsTensor parse_entry(const std::string& name, const json& v, const std::string& path) {
  FP4_CHECK(v.is_object(), "{}: tensor '{}' is {}, expected an object with dtype, shape and "
            "data_offsets", path, name, v.dump());
  SafetensorsTensor t;
  t.name = name;
  auto dtype = v.find("dtype");
  FP4_CHECK(dtype != v.end() && dtype->is_string(), "{}: tensor '{}' has no string 'dtype'",
            path, name);
  t.dtype = dtype->get<std::string>();
  auto shape = v.find("shape");
  FP4_CHECK(shape != v.end(), "{}: tensor '{}' has no 'shape'", path, name);
  t.shape = read_int_array(*shape, path, name, "shape");
  FP4_CHECK(element_count(t.shape).has_value(), "{}: tensor '{}': shape {} has more elements "
            "than a 64-bit count holds", path, name, shape_text(t.shape));
  auto offsets = v.find("data_offsets");
  FP4_CHECK(offsets != v.end(), "{}: tensor '{}' has no 'data_offsets'", path, name);
  const auto off = read_int_array(*offsets, path, name, "data_offsets");
  FP4_CHECK(off.size() == 2 && off[0] <= off[1],
            "{}: tensor '{}': data_offsets must be [begin, end] with begin <= end, got {}", path,
            name, offsets->dump());
  t.begin = off[0];
  t.end = off[1];
  return t;
}

}  // namespace

int64_t SafetensorsTensor::elements() const {
  const std::optional<int64_t> n = element_count(shape);
  FP4_CHECK(n.has_value(), "tensor '{}': shape {} has more elements than a 64-bit count holds",
            name, shape_text(shape));
  return *n;
}

int64_t SafetensorsHeader::data_bytes() const {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.bytes();
  return n;
}

int dtype_bits(const std::string& dtype) {
  static const std::map<std::string, int> bits = {
      {"BOOL", 8},    {"U8", 8},       {"I8", 8},       {"F8_E4M3", 8}, {"F8_E5M2", 8},
      {"F8_E8M0", 8}, {"I16", 16},     {"U16", 16},     {"F16", 16},    {"BF16", 16},
      {"I32", 32},    {"U32", 32},     {"F32", 32},     {"I64", 64},    {"U64", 64},
      {"F64", 64},    {"C64", 64},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6}};
  auto it = bits.find(dtype);
  return it == bits.end() ? 0 : it->second;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  namespace fs = std::filesystem;
  SafetensorsHeader h;
  h.path = path;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  FP4_CHECK(!ec, "cannot read safetensors file {}: {}", path, ec.message());
  h.file_bytes = static_cast<int64_t>(size);
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "cannot open safetensors file {}", path);
  FP4_CHECK(size >= 8, "{}: the file has {} bytes, expected at least 8 (the little-endian u64 "
            "header length)", path, size);
  std::array<unsigned char, 8> len_bytes{};
  in.read(reinterpret_cast<char*>(len_bytes.data()), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[static_cast<size_t>(i)];
  FP4_CHECK(n <= kMaxHeaderBytes, "{}: header length {} exceeds the format's {}-byte limit; "
            "expected an 8-byte little-endian length followed by a JSON header", path, n,
            kMaxHeaderBytes);
  FP4_CHECK(n <= size - 8, "{}: header length {} but only {} bytes follow the length field "
            "(truncated file?)", path, n, size - 8);
  h.header_bytes = static_cast<int64_t>(n);
  std::string text(static_cast<size_t>(n), '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  FP4_CHECK(in.gcount() == static_cast<std::streamsize>(n), "{}: could not read the {}-byte "
            "header", path, n);

  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: the {}-byte header is not valid JSON ({})", path, n, e.what());
  }
  FP4_CHECK(header.is_object(), "{}: the header is {}, expected a JSON object of tensors", path,
            header.type_name());
  const int64_t data_size = h.file_bytes - 8 - h.header_bytes;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensor t = parse_entry(name, value, path);
    FP4_CHECK(t.end <= data_size, "{}: tensor '{}' ends at byte {} of the data section, but the "
              "file holds only {} bytes of data (truncated file?)", path, name, t.end, data_size);
    if (const int bits = dtype_bits(t.dtype); bits > 0) {
      int64_t total_bits = 0;
      FP4_CHECK(!__builtin_mul_overflow(t.elements(), int64_t{bits}, &total_bits),
                "{}: tensor '{}' ({} {}): {} elements of {} bits are more bits than a 64-bit "
                "count holds", path, name, t.dtype, shape_text(t.shape), t.elements(), bits);
      // Rounded up to whole bytes without the + 7 that could overflow near the int64 limit.
      const int64_t expected = total_bits / 8 + (total_bits % 8 != 0 ? 1 : 0);
      FP4_CHECK(t.bytes() == expected, "{}: tensor '{}' ({} {}) spans {} bytes, expected {}",
                path, name, t.dtype, shape_text(t.shape), t.bytes(), expected);
    }
    h.tensors.push_back(std::move(t));
  }
  return h;
}

WeightBreakdown scan_checkpoint(const std::string& dir, const ModelConfig& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  FP4_CHECK(fs::is_directory(dir, ec), "--checkpoint {} is not a directory", dir);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  }
  FP4_CHECK(!ec, "cannot list {}: {}", dir, ec.message());
  FP4_CHECK(!files.empty(), "{}: no *.safetensors files", dir);
  std::sort(files.begin(), files.end());

  // Group by what decides per-GPU bytes, so a 90,000-tensor checkpoint becomes a short table.
  std::map<std::tuple<int, int, int64_t, std::string>, WeightGroup> groups;
  int64_t file_bytes = 0, tensors = 0;
  for (const auto& file : files) {
    const SafetensorsHeader h = read_safetensors_header(file.string());
    file_bytes += h.file_bytes;
    for (const auto& t : h.tensors) {
      WeightGroup c = classify_tensor(t.name, config.num_kv_heads, config.num_index_heads);
      auto key = std::make_tuple(static_cast<int>(c.cls), static_cast<int>(c.sharding), c.heads,
                                 t.dtype);
      auto [it, fresh] = groups.try_emplace(key, c);
      WeightGroup& g = it->second;
      if (fresh) {
        g.name = fmt::format("{} tensors ({})", weight_class_name(c.cls), t.dtype);
        g.stored_dtype = t.dtype;
        g.count = g.params = g.bytes = 0;
      }
      g.count += 1;
      // Dtypes without a known width are not checked against data_offsets, so their shapes
      // can still claim more parameters than a sum of them can hold.
      FP4_CHECK(!__builtin_add_overflow(g.params, t.elements(), &g.params),
                "{}: tensor '{}' ({} {}) takes the {} parameter count past what a 64-bit "
                "count holds", file.string(), t.name, t.dtype, shape_text(t.shape), g.name);
      g.bytes += t.bytes();
      ++tensors;
    }
  }
  WeightBreakdown w;
  w.origin = fmt::format("checkpoint {}: {} files, {} tensors, {} bytes on disk", dir,
                         files.size(), tensors, file_bytes);
  w.num_experts = config.num_experts;
  for (auto& [key, g] : groups) w.groups.push_back(std::move(g));
  return w;
}

}  // namespace fp4::model
