#include "model/tensor_decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"

namespace fp4::model {
namespace {

// safetensors stores little-endian; the decoders below read the bytes as they lie.
static_assert(std::endian::native == std::endian::little, "fp4serve reads tensors in place");

// Below this many elements a tensor decodes faster on the calling thread than with threads
// started for it (parallel_for starts and joins its threads on every call).
constexpr int64_t kParallelMinElements = int64_t{1} << 16;

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

int64_t product(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    FP4_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n),
              "shape {} has a negative dimension or more elements than a 64-bit count holds",
              shape_string(shape));
  }
  return n;
}

std::string describe_stored(const TensorRef& t) {
  return fmt::format("tensor '{}' ({} {} in {})", t.name, t.dtype, shape_string(t.shape), t.file);
}

// The header reader checks sizes against the dtype; the decoders rely on it, so check again.
void check_bytes(const TensorRef& t, int64_t bytes_per_element) {
  int64_t expected = 0;
  FP4_CHECK(!__builtin_mul_overflow(t.elements(), bytes_per_element, &expected) &&
                static_cast<int64_t>(t.bytes.size()) == expected,
            "{} spans {} bytes, expected {} ({} bytes per element)", describe_stored(t),
            t.bytes.size(), expected, bytes_per_element);
}

bool is_scalar(const TensorRef& t) {
  return t.shape.empty() || (t.shape.size() == 1 && t.shape[0] == 1);
}

// The shape of a block-scale tensor: the weight's leading dimensions, then one scale per block
// of the inner dimension (a partial last block gets a scale of its own).
std::vector<int64_t> block_scale_shape(const std::vector<int64_t>& shape, int64_t inner,
                                       int64_t block) {
  std::vector<int64_t> s(shape.begin(), shape.end() - 1);
  s.push_back(ceil_div(inner, block));
  return s;
}

void check_companion(const TensorRef& weight, const TensorRef& companion,
                     std::initializer_list<std::string_view> dtypes,
                     const std::vector<int64_t>& shape, std::string_view format) {
  const bool dtype_ok = std::find(dtypes.begin(), dtypes.end(), companion.dtype) != dtypes.end();
  FP4_CHECK(dtype_ok && companion.shape == shape,
            "{}: its scale '{}' is {} {} in {}; {} expects {} {}", describe_stored(weight),
            companion.name, companion.dtype, shape_string(companion.shape), companion.file, format,
            *dtypes.begin(), shape_string(shape));
  check_bytes(companion, 1);
}

void check_scalar_companion(const TensorRef& weight, const TensorRef& companion,
                            std::string_view format) {
  FP4_CHECK(companion.dtype == "F32" && is_scalar(companion),
            "{}: its scale '{}' is {} {} in {}; {} expects an F32 scalar (shape [] or [1])",
            describe_stored(weight), companion.name, companion.dtype,
            shape_string(companion.shape), companion.file, format);
}

// Decodes the first n (<= kBlock) values of a block whose stored bytes may stop short: the
// partial last block of a row whose inner dimension is not a multiple of the block.
template <int kBlock, int kBlockBytes, typename Fn>
void decode_blocks(const uint8_t* row, const uint8_t* scales, int64_t cols, float* out,
                   Fn&& dequantize) {
  for (int64_t b = 0, c = 0; c < cols; ++b, c += kBlock) {
    const int64_t n = std::min<int64_t>(kBlock, cols - c);
    const uint8_t* block = row + b * kBlockBytes;
    if (n == kBlock) {
      dequantize(block, scales[b], out + c);
      continue;
    }
    uint8_t padded[kBlockBytes] = {};
    std::memcpy(padded, block, static_cast<size_t>(ceil_div(n * kBlockBytes, kBlock)));
    float values[kBlock];
    dequantize(padded, scales[b], values);
    std::copy(values, values + n, out + c);
  }
}

}  // namespace

int64_t TensorRef::elements() const { return product(shape); }

std::string_view storage_format_name(StorageFormat format) {
  switch (format) {
    case StorageFormat::kF32: return "f32";
    case StorageFormat::kBF16: return "bf16";
    case StorageFormat::kF16: return "f16";
    case StorageFormat::kFp8: return "fp8";
    case StorageFormat::kMxfp8: return "mxfp8";
    case StorageFormat::kNvfp4: return "nvfp4";
  }
  fail_internal("unknown storage format {}", static_cast<int>(format));
}

int64_t WeightLayout::stored_bytes() const {
  int64_t n = 0;
  for (const TensorRef* t : {weight, scale, scale_2}) {
    if (t != nullptr) n += static_cast<int64_t>(t->bytes.size());
  }
  return n;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += fmt::format("{}{}", i == 0 ? "" : ", ", shape[i]);
  }
  return s + "]";
}

std::optional<std::string> weight_module(std::string_view name) {
  constexpr std::string_view kSuffix = ".weight";
  if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) return std::nullopt;
  return std::string(name.substr(0, name.size() - kSuffix.size()));
}

float read_f32_scalar(const TensorRef& t) {
  FP4_CHECK(t.dtype == "F32" && is_scalar(t) && t.bytes.size() == 4,
            "{}: expected an F32 scalar (shape [] or [1], 4 bytes)", describe_stored(t));
  float v;
  std::memcpy(&v, t.bytes.data(), 4);
  return v;
}

WeightLayout resolve_layout(const TensorRef& w, const TensorLookup& find) {
  WeightLayout layout;
  layout.weight = &w;
  const std::optional<std::string> module = weight_module(w.name);
  const bool quantized_dtype = w.dtype == "F8_E4M3" || w.dtype == "U8";
  FP4_CHECK(module.has_value() || !quantized_dtype,
            "{}: {} values decode only with scales, and only a '<module>.weight' tensor has them "
            "('<module>.weight_scale', ...); expected F32, BF16 or F16 for a tensor named '{}'",
            describe_stored(w), w.dtype, w.name);
  const std::string m = module.value_or("");
  auto companion = [&](std::string_view suffix) -> const TensorRef* {
    return module ? find(*module + std::string(suffix)) : nullptr;
  };
  const TensorRef* scale = companion(".weight_scale");
  const TensorRef* scale_inv = companion(".weight_scale_inv");
  const TensorRef* scale_2 = companion(".weight_scale_2");

  if (w.dtype == "F32" || w.dtype == "BF16" || w.dtype == "F16") {
    // A scale beside an unquantized weight means a layout we do not know; ignoring it would
    // load wrong values without a word.
    const TensorRef* s = scale != nullptr ? scale : scale_inv != nullptr ? scale_inv : scale_2;
    FP4_CHECK(s == nullptr, "{} has a scale '{}' beside it; expected no scales for an "
              "unquantized {} weight", describe_stored(w), s->name, w.dtype);
    check_bytes(w, w.dtype == "F32" ? 4 : 2);
    layout.format = w.dtype == "F32"    ? StorageFormat::kF32
                    : w.dtype == "BF16" ? StorageFormat::kBF16
                                        : StorageFormat::kF16;
    return layout;
  }

  if (w.dtype == "F8_E4M3") {
    FP4_CHECK(scale == nullptr || scale_inv == nullptr, "{}: both '{}' and '{}' are present; "
              "expected one scale", describe_stored(w), scale->name, scale_inv->name);
    const TensorRef* s = scale != nullptr ? scale : scale_inv;
    FP4_CHECK(s != nullptr && !w.shape.empty(),
              "{} has no usable scale: expected '{}.weight_scale_inv' or '{}.weight_scale', "
              "either UE8M0 (U8 or F8_E8M0) of shape [..., ceil(in/32)] for MXFP8 or an F32 "
              "scalar for per-tensor FP8, beside a weight of at least one dimension",
              describe_stored(w), m, m);
    check_bytes(w, 1);
    layout.scale = s;
    if (s->dtype == "U8" || s->dtype == "F8_E8M0") {
      check_companion(w, *s, {"U8", "F8_E8M0"},
                      block_scale_shape(w.shape, w.shape.back(), kMxfp8BlockElems), "MXFP8");
      layout.format = StorageFormat::kMxfp8;
    } else {
      FP4_CHECK(s->dtype == "F32" && is_scalar(*s),
                "{}: its scale '{}' is {} {} in {}; expected UE8M0 (U8 or F8_E8M0) {} for MXFP8 "
                "or an F32 scalar (shape [] or [1]) for per-tensor FP8", describe_stored(w),
                s->name, s->dtype, shape_string(s->shape), s->file,
                shape_string(block_scale_shape(w.shape, w.shape.back(), kMxfp8BlockElems)));
      layout.format = StorageFormat::kFp8;
    }
    return layout;
  }

  if (w.dtype == "U8") {
    FP4_CHECK(scale != nullptr && scale_2 != nullptr && !w.shape.empty(),
              "{}: a U8 weight is NVFP4 and needs '{}.weight_scale' (F8_E4M3 of shape "
              "[..., ceil(in/16)]) and '{}.weight_scale_2' (F32 scalar); {} missing",
              describe_stored(w), m, m,
              w.shape.empty() ? "it has no dimensions"
              : scale == nullptr && scale_2 == nullptr ? "both are"
              : scale == nullptr ? "weight_scale is" : "weight_scale_2 is");
    check_bytes(w, 1);
    // Two codes per byte: the stored inner dimension c holds 2c - 1 or 2c values, and either
    // way ceil(c / 8) blocks of 16.
    check_companion(w, *scale, {"F8_E4M3"}, block_scale_shape(w.shape, 2 * w.shape.back(),
                    kNvfp4BlockElems), "NVFP4");
    check_scalar_companion(w, *scale_2, "NVFP4's weight_scale_2");
    layout.format = StorageFormat::kNvfp4;
    layout.scale = scale;
    layout.scale_2 = scale_2;
    return layout;
  }

  fail("{}: unsupported weight dtype {}; expected F32, BF16, F16, F8_E4M3 (FP8 or MXFP8, with a "
       "scale) or U8 (NVFP4, with weight_scale and weight_scale_2)", describe_stored(w), w.dtype);
}

void check_logical_shape(const WeightLayout& layout, std::span<const int64_t> expected) {
  const TensorRef& w = *layout.weight;
  FP4_CHECK(std::all_of(expected.begin(), expected.end(), [](int64_t d) { return d >= 0; }),
            "tensor '{}': expected shape {} has a negative dimension", w.name,
            shape_string(expected));
  if (layout.format != StorageFormat::kNvfp4) {
    FP4_CHECK(std::equal(w.shape.begin(), w.shape.end(), expected.begin(), expected.end()),
              "tensor '{}': shape {} in {}, expected {}", w.name, shape_string(w.shape), w.file,
              shape_string(expected));
    return;
  }
  // A logical inner dimension n packs into exactly ceil(n/2) bytes. A layout padded to whole
  // blocks (8 * ceil(n/16) bytes) is not accepted: its stored shape fits every n of the last
  // block, so a wrong expectation could not be told from a right one.
  const int64_t packed = w.shape.back();
  const bool ok = expected.size() == w.shape.size() &&
                  std::equal(w.shape.begin(), w.shape.end() - 1, expected.begin()) &&
                  packed == ceil_div(expected.back(), 2);
  if (!ok) {
    std::vector<int64_t> logical = w.shape;
    logical.back() = 2 * packed;
    fail("tensor '{}': shape {} (NVFP4, stored as U8 {} with scales {}) in {}, expected {}; an "
         "inner dimension n is stored as ceil(n/2) bytes", w.name, shape_string(logical),
         shape_string(w.shape), shape_string(layout.scale->shape), w.file,
         shape_string(expected));
  }
}

void decode_weight(const WeightLayout& layout, std::span<const int64_t> shape,
                   std::span<float> out, int num_threads) {
  const int64_t n = product(shape);
  if (static_cast<int64_t>(out.size()) != n) {
    fail_internal("decode_weight: {} output floats for shape {}", out.size(), shape_string(shape));
  }
  if (n == 0) return;
  const int threads = n >= kParallelMinElements ? num_threads : 1;
  const uint8_t* src = layout.weight->bytes.data();
  float* dst = out.data();
  // Block formats run along the last dimension; n > 0 here, so cols > 0.
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t rows = n / cols;

  switch (layout.format) {
    case StorageFormat::kF32:
      parallel_for(n, [&](int64_t b, int64_t e) {
        std::memcpy(dst + b, src + 4 * b, static_cast<size_t>(4 * (e - b)));
      }, threads);
      return;
    case StorageFormat::kBF16:
    case StorageFormat::kF16: {
      const bool bf16 = layout.format == StorageFormat::kBF16;
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          uint16_t h;
          std::memcpy(&h, src + 2 * i, 2);
          dst[i] = bf16 ? bf16_decode(h) : fp16_decode(h);
        }
      }, threads);
      return;
    }
    case StorageFormat::kFp8: {
      const float scale = read_f32_scalar(*layout.scale);
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          // A NaN code stays the canonical NaN, as in the block formats' decoders.
          const float v = e4m3_decode(src[i]);
          dst[i] = is_nan(v) ? quiet_nan() : v * scale;
        }
      }, threads);
      return;
    }
    case StorageFormat::kMxfp8: {
      const uint8_t* scales = layout.scale->bytes.data();
      const int64_t scale_cols = layout.scale->shape.back();
      parallel_for(rows, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          decode_blocks<kMxfp8BlockElems, kMxfp8BlockElems>(
              src + r * cols, scales + r * scale_cols, cols, dst + r * cols,
              [](const uint8_t* v, uint8_t s, float* o) { mxfp8_dequantize_block(v, s, o); });
        }
      }, threads);
      return;
    }
    case StorageFormat::kNvfp4: {
      const uint8_t* scales = layout.scale->bytes.data();
      const int64_t scale_cols = layout.scale->shape.back();
      const int64_t packed_cols = layout.weight->shape.back();
      const float global = read_f32_scalar(*layout.scale_2);
      parallel_for(rows, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          decode_blocks<kNvfp4BlockElems, kNvfp4BlockCodeBytes>(
              src + r * packed_cols, scales + r * scale_cols, cols, dst + r * cols,
              [global](const uint8_t* p, uint8_t s, float* o) {
                nvfp4_dequantize_block(p, s, global, o);
              });
        }
      }, threads);
      return;
    }
  }
}

}  // namespace fp4::model
