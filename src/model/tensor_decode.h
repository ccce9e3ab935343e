// How a stored weight turns into FP32: its storage format is recognised from the stored dtype
// and the companion tensors beside it (`<module>.weight_scale`, `.weight_scale_inv`,
// `.weight_scale_2`), then decoded with the codecs of src/formats. The layouts, with their names
// and shapes, are described in docs/formats/checkpoints.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::model {

// One tensor of a checkpoint: a view of its bytes inside the memory-mapped file.
struct TensorRef {
  std::string name;
  std::string dtype;  // as stored: "F32", "BF16", "F16", "F8_E4M3", "U8", "I32", ...
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  std::string_view file;  // the shard that holds it
  int64_t elements() const;
};

enum class StorageFormat { kF32, kBF16, kF16, kFp8, kMxfp8, kNvfp4 };

// "f32", "bf16", "f16", "fp8", "mxfp8", "nvfp4".
std::string_view storage_format_name(StorageFormat format);

// A weight and the companions that decide how it decodes.
struct WeightLayout {
  StorageFormat format = StorageFormat::kF32;
  const TensorRef* weight = nullptr;
  const TensorRef* scale = nullptr;    // fp8: F32 scalar; mxfp8: UE8M0 blocks; nvfp4: E4M3 blocks
  const TensorRef* scale_2 = nullptr;  // nvfp4: the FP32 global scale
  int64_t stored_bytes() const;        // the weight and its scales, as read from disk
};

using TensorLookup = std::function<const TensorRef*(std::string_view name)>;

// "[a, b]".
std::string shape_string(std::span<const int64_t> shape);

// `name` without a trailing ".weight", or nullopt: only "<module>.weight" tensors have scales.
std::optional<std::string> weight_module(std::string_view name);

// Recognises the storage format of `weight` and checks its companions' dtypes and shapes.
// Throws fp4::Error naming the tensor, its stored dtype and shape, and what was expected.
WeightLayout resolve_layout(const TensorRef& weight, const TensorLookup& find);

// Checks that the weight holds a tensor of logical shape `expected` (for NVFP4 the stored
// shape has half the inner dimension); throws naming the logical and the stored shapes.
void check_logical_shape(const WeightLayout& layout, std::span<const int64_t> expected);

// Decodes the weight, of the logical `shape` check_logical_shape accepted, into `out`
// (row-major, one float per element); tensors of many elements are split over threads.
void decode_weight(const WeightLayout& layout, std::span<const int64_t> shape,
                   std::span<float> out, int num_threads);

// The value of an F32 scalar (shape [] or [1]) such as weight_scale_2 or input_scale.
float read_f32_scalar(const TensorRef& t);

}  // namespace fp4::model
