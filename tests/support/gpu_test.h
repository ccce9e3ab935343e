// Fixtures of the tests that run CUDA kernels: each skips, saying so, where no GPU is visible
// (CI builds them everywhere and runs them where a GPU is).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"

namespace fp4::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible; kernel tests need one";
  }
};

// With a CudaBackend made for each test.
class CudaBackendTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (!IsSkipped()) gpu_ = std::make_unique<cuda::CudaBackend>();
  }
  std::unique_ptr<cuda::CudaBackend> gpu_;
};

}  // namespace fp4::testing
