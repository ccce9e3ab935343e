// An owned allocation of a backend's memory (host memory on the CPU, device memory on a GPU),
// typed, so that code written once against Backend can hold its tensors without knowing where
// they live.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/check.h"

namespace fp4 {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& backend, size_t size)
      : backend_(&backend), size_(size), data_(static_cast<T*>(backend.allocate(size * sizeof(T)))) {}
  // A copy of `host` in the backend's memory.
  Buffer(Backend& backend, const std::vector<T>& host) : Buffer(backend, host.size()) {
    upload(host);
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept
      : backend_(other.backend_), size_(std::exchange(other.size_, 0)),
        data_(std::exchange(other.data_, nullptr)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      backend_ = other.backend_;
      size_ = std::exchange(other.size_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void upload(const std::vector<T>& host) {
    FP4_CHECK(host.size() <= size_, "upload of {} elements into a buffer of {}", host.size(), size_);
    if (!host.empty()) backend_->copy_from_host(data_, host.data(), host.size() * sizeof(T));
  }
  // The first n elements (all by default), on the host.
  std::vector<T> download(size_t n) const {
    FP4_CHECK(n <= size_, "download of {} elements from a buffer of {}", n, size_);
    std::vector<T> host(n);
    if (n > 0) backend_->copy_to_host(host.data(), data_, n * sizeof(T));
    return host;
  }
  std::vector<T> download() const { return download(size_); }
  void zero() {
    if (size_ > 0) backend_->fill_zero(data_, size_ * sizeof(T));
  }

 private:
  void reset() {
    if (data_ != nullptr) backend_->release(data_);
    data_ = nullptr;
    size_ = 0;
  }

  Backend* backend_ = nullptr;
  size_t size_ = 0;
  T* data_ = nullptr;
};

}  // namespace fp4
