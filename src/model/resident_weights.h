// The model's weights where the backend's ops read them. On a backend that reads host memory
// (the CPU) these are the loaded tensors themselves, with no copy; on a GPU each tensor is
// copied once into device memory when the model is loaded.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "backend/buffer.h"
#include "model/model_weights.h"

namespace fp4::model {

class ResidentWeights {
 public:
  ResidentWeights(const ModelWeights& weights, Backend& backend);

  // Where the backend reads `host` (a tensor of the ModelWeights given above); nullptr for an
  // empty tensor (an absent norm or bias).
  const float* operator()(const std::vector<float>& host) const { return find<float>(host); }
  const uint8_t* operator()(const std::vector<uint8_t>& host) const { return find<uint8_t>(host); }
  const float* operator()(const LinearWeight& w) const { return (*this)(w.w); }

 private:
  template <typename T>
  const T* find(const std::vector<T>& host) const;
  void place(const void* host, size_t bytes, Backend& backend);

  bool host_ = true;
  std::unordered_map<const void*, Buffer<uint8_t>> copies_;
};

}  // namespace fp4::model
