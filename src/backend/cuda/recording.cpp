#include "backend/cuda/recording.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace fp4::cuda {
namespace {

constexpr size_t kAlignment = 256;
// A chunk holds several layers' activations at decode sizes; a larger request gets its own.
constexpr size_t kChunkBytes = size_t{64} << 20;

size_t rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

RecordingArena::~RecordingArena() {
  for (const Chunk& c : chunks_) (void)cudaFree(c.base);
}

void RecordingArena::start() {
  FP4_CHECK(held_.empty(), "a recorded step still holds {} buffer(s) of the recording before it", held_.size());
  released_.clear();
  for (Chunk& c : chunks_) c.used = 0;
}

void* RecordingArena::take(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t size = rounded(bytes);
  void* p = nullptr;
  if (auto it = released_.find(size); it != released_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    auto chunk = std::find_if(chunks_.begin(), chunks_.end(), [&](const Chunk& c) { return c.bytes - c.used >= size; });
    if (chunk == chunks_.end()) {
      Chunk fresh{.bytes = std::max(size, kChunkBytes)};
      // Plain memory, not the stream-ordered pool's: the capture is in relaxed mode, which
      // allows it, and it leaves no node in the graph.
      void* base = nullptr;
      FP4_CUDA_CHECK(cudaMalloc(&base, fresh.bytes));
      fresh.base = static_cast<uint8_t*>(base);
      chunks_.push_back(fresh);
      chunk = chunks_.end() - 1;
    }
    p = chunk->base + chunk->used;
    chunk->used += size;
  }
  held_.emplace(p, size);
  return p;
}

bool RecordingArena::give(const void* p) noexcept {
  const auto it = held_.find(p);
  if (it == held_.end()) return false;
  released_[it->second].push_back(const_cast<void*>(p));
  held_.erase(it);
  return true;
}

int64_t RecordingArena::reserved_bytes() const {
  int64_t bytes = 0;
  for (const Chunk& c : chunks_) bytes += static_cast<int64_t>(c.bytes);
  return bytes;
}

GraphCensus census(cudaGraph_t graph) {
  GraphCensus g;
  size_t count = 0;
  FP4_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) FP4_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    FP4_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) ++g.kernels;
    else if (type == cudaGraphNodeTypeMemAlloc || type == cudaGraphNodeTypeMemFree) ++g.memory_nodes;
    else ++g.other_nodes;
  }
  size_t edges = 0;
  FP4_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  if (edges > 0) FP4_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges));
  g.edges = static_cast<int64_t>(edges);
  for (size_t i = 0; i < edges; ++i) g.programmatic_edges += data[i].type == cudaGraphDependencyTypeProgrammatic;
  return g;
}

}  // namespace fp4::cuda
