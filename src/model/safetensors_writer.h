// Writing safetensors files (the reader is model/safetensors.h). The layout written is
//   [u64 little-endian N][N bytes: JSON header, padded with spaces][tensor data]
// with N chosen so the data section starts on an 8-byte boundary, and the tensors' data laid
// out back to back in the order given, as the format requires (no holes between tensors).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace fp4::model {

// One tensor to write. `shape` is the stored shape: packed formats (two FP4 values per U8)
// give the shape of their bytes, not of the logical values. `data` must hold exactly the
// bytes that dtype x shape implies.
struct SafetensorsWriteTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "F8_E4M3", "U8", "I32", ...
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// Writes `path` atomically (see write_file_atomically). Throws fp4::Error naming the file and
// the tensor when a name is empty, repeated or "__metadata__", a dtype is unknown or not a
// whole number of bytes per element, or the data size disagrees with dtype x shape.
void write_safetensors(const std::string& path, std::span<const SafetensorsWriteTensor> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes the concatenation of `chunks` to `<path>.tmp`, flushes it to disk and renames it to
// `path`, so a reader (or a run that is killed half-way) never sees a partial file under the
// final name. A stale `<path>.tmp` from an earlier run is overwritten. On failure (cannot
// open, a short write such as a full disk, a failed sync or close, a failed rename) the
// temporary file is removed and fp4::Error names the path and the system's reason.
void write_file_atomically(const std::string& path,
                           std::span<const std::span<const uint8_t>> chunks);

// The same for one text (config.json and the like).
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace fp4::model
