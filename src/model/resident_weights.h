// The model's weights where the backend's ops read them. On a backend that reads host memory
// (the CPU) these are the loaded tensors themselves, with no copy; on a GPU each tensor is
// copied once into device memory when the model is loaded. There a projection (or the
// embedding) whose every value is exactly a BF16, as a checkpoint's BF16 and MXFP8 tensors
// are, is held in BF16: the same numbers in half the bytes (LinearParams::w_bf16); and a
// projection whose every run of 32 values along a row is moreover exactly an MXFP8 block, as a
// checkpoint's MXFP8 tensors are, in MXFP8 (LinearParams::w_e4m3): the same numbers in 33
// bytes per 32 values. The embedding stays BF16, since the gather reads it by rows.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "backend/buffer.h"
#include "model/model_weights.h"

namespace fp4::model {

class ResidentWeights {
 public:
  // How MXFP8-exact projections are held: as MXFP8 (the default), or as BF16 (the form before
  // MXFP8 was held, for side-by-side measurements).
  enum class Mxfp8 { kHold, kAsBf16 };
  ResidentWeights(const ModelWeights& weights, Backend& backend, Mxfp8 mxfp8 = Mxfp8::kHold);

  // Places the tensors of `weights` not placed yet: a model built layer by layer. Tensors are
  // known by their data pointers, so every host vector must keep its buffer and size for the
  // life of this object; on a device backend its pages may be handed back to the system once
  // placed (madvise), never the vector freed.
  void place_new(const ModelWeights& weights, Backend& backend);
  // Bytes of the device copies (0 on a backend that reads host memory).
  int64_t device_bytes() const { return device_bytes_; }

  // Where the backend reads `host` (a tensor of the ModelWeights given above); nullptr for an
  // empty tensor (an absent norm or bias).
  const float* operator()(const std::vector<float>& host) const { return find<float>(host); }
  const uint8_t* operator()(const std::vector<uint8_t>& host) const { return find<uint8_t>(host); }
  // A projection: exactly one of w, w_bf16 and w_e4m3 (with w_scales) is set (all null when it
  // is empty).
  struct Linear {
    const float* w = nullptr;
    const uint16_t* w_bf16 = nullptr;
    const uint8_t* w_e4m3 = nullptr;
    const uint8_t* w_scales = nullptr;
  };
  Linear operator()(const LinearWeight& w) const;

 private:
  template <typename T>
  const T* find(const std::vector<T>& host) const;
  void place(const void* host, size_t bytes, Backend& backend);
  void place_linear(const LinearWeight& w, bool gathered, Backend& backend);

  bool host_ = true;
  Mxfp8 mxfp8_ = Mxfp8::kHold;
  int64_t device_bytes_ = 0;
  std::unordered_map<const void*, Buffer<uint8_t>> copies_;
  std::unordered_map<const void*, Buffer<uint16_t>> bf16_copies_;  // by the FP32 tensor's data
  struct Mxfp8Copy {
    Buffer<uint8_t> codes, scales;
  };
  std::unordered_map<const void*, Mxfp8Copy> mxfp8_copies_;  // by the FP32 tensor's data
};

}  // namespace fp4::model
