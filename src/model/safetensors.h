// safetensors headers, read without touching tensor data. A file is
//   [8 bytes: little-endian u64 N][N bytes: JSON header][tensor data]
// and the header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]},
// offsets relative to the start of the data section; an optional "__metadata__" entry holds
// strings. Sizes are checked against the file so a truncated download is caught here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace fp4::model {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as stored: "BF16", "F8_E4M3", "U8", ...
  std::vector<int64_t> shape;
  int64_t begin = 0;           // data_offsets, relative to the data section
  int64_t end = 0;
  int64_t bytes() const { return end - begin; }
  int64_t elements() const;
};

struct SafetensorsHeader {
  std::string path;
  int64_t file_bytes = 0;
  int64_t header_bytes = 0;  // the JSON header, without the 8-byte length
  std::vector<SafetensorsTensor> tensors;
  int64_t data_bytes() const;
};

// Bits per element of a safetensors dtype, or 0 for a dtype we do not know (its size is then
// taken from data_offsets without a cross-check).
int dtype_bits(const std::string& dtype);

// Reads and validates one file's header. Throws fp4::Error naming the file and what was
// expected when the file is too short, the header is not JSON, or an entry is malformed.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Reads every *.safetensors file of a directory (headers only) and groups the tensors by class
// and sharding. The model config supplies the expert and head counts that sharding needs.
WeightBreakdown scan_checkpoint(const std::string& dir, const ModelConfig& config);

}  // namespace fp4::model
