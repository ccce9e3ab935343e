// What recording a decode step into a CUDA graph needs besides the capture itself: device memory
// for the buffers the step's ops allocate, and a census of the graph that comes out.
//
// Stream-ordered allocations made while the stream is captured become memory nodes of the graph,
// and a kernel whose predecessor is a memory node cannot be that kernel's programmatic dependent
// (an edge of that type joins two kernel nodes only). So with the step's buffers taken from the
// stream-ordered pool, every op boundary of a recorded step serializes in full, and the overlaps
// that the kernels are built for (dependent_launch.cuh) happen op by op but not in the graph.
// The arena gives the recording plain device memory instead, which leaves the kernels adjacent.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace fp4::cuda {

// The recordings of one backend replay on its one stream, one after another, and a recording
// releases every buffer it allocates before it ends (a step's activations do not outlive it).
// So each recording starts from an empty arena and reuses the same memory, as the graphs' own
// memory pool would; memory is added in chunks as a recording needs it and kept until the arena
// goes. Within a recording a released buffer is reused for a later one of the same size: the
// ops run in stream order, and a programmatic dependent touches its buffers only after its wait.
class RecordingArena {
 public:
  RecordingArena() = default;
  ~RecordingArena();
  RecordingArena(const RecordingArena&) = delete;
  RecordingArena& operator=(const RecordingArena&) = delete;

  // A recording begins: every chunk is free again. Fails if a buffer taken by the last recording
  // is still held.
  void start();
  // Device memory of at least `bytes`, 256-byte aligned (nullptr for 0).
  void* take(size_t bytes);
  // Takes back a pointer from take(); false (and nothing done) for any other pointer.
  bool give(const void* p) noexcept;

  int64_t reserved_bytes() const;

 private:
  struct Chunk {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    size_t used = 0;
  };
  std::vector<Chunk> chunks_;
  std::unordered_map<size_t, std::vector<void*>> released_;  // by rounded size, this recording's
  std::unordered_map<const void*, size_t> held_;             // taken, not given back: rounded size
};

// What a recorded graph holds.
struct GraphCensus {
  int64_t kernels = 0;
  int64_t memory_nodes = 0;  // allocations and frees
  int64_t other_nodes = 0;   // copies, memsets, events, ...
  int64_t edges = 0;
  int64_t programmatic_edges = 0;  // kernel -> kernel edges its dependent may start early on
};

GraphCensus census(cudaGraph_t graph);

}  // namespace fp4::cuda
