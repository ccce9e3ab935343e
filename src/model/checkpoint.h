// A Hugging Face checkpoint directory, memory-mapped: `model.safetensors`, or
// `model.safetensors.index.json` and the shards it names, or else every `*.safetensors` file.
// Tensors are handed out as views into the read-only mappings (never copied) and loaded as
// FP32 of their logical shape, dequantizing FP8, MXFP8 and NVFP4 weights on the way. Layouts,
// names and the error policy: docs/formats/checkpoints.md.
//
// Thread-safety: after construction every method is const and may be called from several
// threads at once (the progress bar takes a lock).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/progress.h"
#include "model/tensor_decode.h"

namespace fp4::model {

struct CheckpointOptions {
  ProgressMode progress = ProgressMode::kAuto;
  std::FILE* progress_stream = nullptr;  // nullptr: stderr
  int num_threads = 0;                   // dequantization threads; 0 = all cores
};

class Checkpoint {
 public:
  // Opens and maps every shard and checks the index against the shards' headers. Throws
  // fp4::Error naming the file, shard or tensor at fault.
  explicit Checkpoint(std::string dir, CheckpointOptions options = {});
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  std::string_view dir() const { return dir_; }
  // Bytes of all tensors (what a full load reads), as the progress bar counts them.
  int64_t total_bytes() const { return total_bytes_; }
  // Tensor names, sorted.
  std::vector<std::string_view> names() const;
  // The shard files, in the order they were opened.
  std::vector<std::string_view> files() const;
  // The index's "metadata" object, or nullptr without an index (or without metadata in it).
  const nlohmann::json* index_metadata() const;

  const TensorRef* find(std::string_view name) const;
  // Throws naming the tensor and the checkpoint, and suggesting a similar name if one exists.
  const TensorRef& get(std::string_view name) const;

  // The weight as FP32 of its logical shape `expected_shape`, dequantized as its storage
  // format requires; advances the progress bar by the bytes read.
  std::vector<float> load_f32(std::string_view name, std::span<const int64_t> expected_shape) const;
  std::vector<float> load_f32(std::string_view name, std::initializer_list<int64_t> shape) const {
    return load_f32(name, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // An NVFP4 weight as stored, for kernels that read NVFP4 directly: codes [out, in / 2] (two
  // per byte, the even column in the low nibble), E4M3 block scales [out, in / 16] and the FP32
  // global scale. nullopt when the weight is stored in another format; throws naming the tensor
  // when its shapes are not those of a logical [out, in] with in a multiple of 16. Advances the
  // progress bar like load_f32.
  struct Nvfp4View {
    std::span<const uint8_t> codes, scales;
    float global_scale = 1.0f;
  };
  std::optional<Nvfp4View> nvfp4_view(std::string_view name, int64_t out, int64_t in) const;
  // "f32", "bf16", "f16", "fp8", "mxfp8" or "nvfp4"; throws for a layout load_f32 refuses.
  std::string_view describe(std::string_view name) const;
  // The activation calibration scale `<module>.input_scale` of a quantized weight, if stored.
  // fp4serve quantizes activations per block at run time; the value is exposed, not applied.
  std::optional<float> input_scale(std::string_view weight_name) const;

  // Ends the progress line now (a load that skips some tensors never reaches the total).
  void finish_progress() const;

 private:
  struct MappedFile;

  WeightLayout layout(std::string_view name) const;
  void open_single(const std::string& path);
  void open_index(const std::string& index_path);
  void open_all();
  void add_shard(const std::string& path, const std::string& index_path);

  std::string dir_;
  CheckpointOptions options_;
  std::vector<std::unique_ptr<MappedFile>> shards_;
  std::map<std::string, TensorRef, std::less<>> tensors_;
  nlohmann::json index_metadata_;
  int64_t total_bytes_ = 0;
  std::unique_ptr<ProgressBar> progress_;
};

}  // namespace fp4::model
