// Writing one safetensors shard tensor by tensor, so a conversion holds at most one tensor in
// memory rather than a whole shard. The header is known up front (every tensor's dtype, shape
// and byte size is planned before any data is produced), the data is appended in header order
// and the file appears under its final name only once complete: it is written to
// `<path>.tmp`, flushed to disk and renamed, as model::write_file_atomically does for files
// built in memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp4::convert {

struct ShardEntry {
  std::string name;
  std::string dtype;  // safetensors dtype name
  std::vector<int64_t> shape;
  int64_t bytes = 0;  // exactly what append() will be given for this tensor
};

// The header bytes (length prefix included) of a shard holding `entries` in that order, padded
// with spaces so the data section starts on an 8-byte boundary.
std::string shard_header(const std::vector<ShardEntry>& entries);

class ShardWriter {
 public:
  // Opens `<path>.tmp` and writes the header. Throws fp4::Error naming the path.
  ShardWriter(std::string path, std::vector<ShardEntry> entries);
  // Removes `<path>.tmp` unless commit() succeeded.
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // The data of the next entry; its size must be that entry's `bytes`. Throws fp4::Error
  // naming the file and the system's reason on a short write (a full disk).
  void append(std::span<const uint8_t> data);
  // Checks every entry was appended, syncs, closes and renames to the final path.
  void commit();

 private:
  void write_all(const uint8_t* data, int64_t size);

  std::string path_, tmp_path_;
  std::vector<ShardEntry> entries_;
  size_t next_ = 0;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace fp4::convert
