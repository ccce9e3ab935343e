// Template part of device.h.
#pragma once

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {

template <typename Fn>
double median_ms(Fn&& fn, int warmup, int reps, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) fn(stream);
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> samples;
  samples.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    FP4_CUDA_CHECK(cudaEventRecord(start, stream));
    fn(stream);
    FP4_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP4_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms);
  }
  FP4_CUDA_CHECK(cudaEventDestroy(start));
  FP4_CUDA_CHECK(cudaEventDestroy(stop));
  return median_of(std::move(samples));
}

template <typename Fn>
double median_graph_ms(Fn&& fn, int warmup, int reps) {
  cudaStream_t stream;
  FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  FP4_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  fn(stream);
  FP4_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  FP4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms =
      median_ms([&](cudaStream_t s) { FP4_CUDA_CHECK(cudaGraphLaunch(exec, s)); }, warmup, reps, stream);
  FP4_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FP4_CUDA_CHECK(cudaGraphDestroy(graph));
  FP4_CUDA_CHECK(cudaStreamDestroy(stream));
  return ms;
}

}  // namespace fp4::cuda
