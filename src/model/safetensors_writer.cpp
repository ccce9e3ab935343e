#include "model/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "model/safetensors.h"

namespace fp4::model {
namespace {

using nlohmann::ordered_json;

// The data section starts on this boundary so that a reader mapping the file can view F32
// and I32 tensors in place; the format pads the header with spaces to get there.
constexpr size_t kDataAlignment = 8;

int64_t expected_bytes(const SafetensorsWriteTensor& t, const std::string& path) {
  const int bits = dtype_bits(t.dtype);
  FP4_CHECK(bits > 0 && bits % 8 == 0,
            "{}: tensor '{}' has dtype \"{}\", expected one whose elements are whole bytes "
            "(F32, BF16, F16, F8_E4M3, U8, I32, ...); pack sub-byte formats into U8",
            path, t.name, t.dtype);
  int64_t n = bits / 8;
  for (int64_t d : t.shape) {
    FP4_CHECK(d >= 0, "{}: tensor '{}' has dimension {} in its shape, expected non-negative "
              "dimensions", path, t.name, d);
    FP4_CHECK(!__builtin_mul_overflow(n, d, &n), "{}: tensor '{}' has more bytes than a 64-bit "
              "count holds", path, t.name);
  }
  return n;
}

std::string header_text(std::span<const SafetensorsWriteTensor> tensors,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& path) {
  // ordered_json keeps the tensors in file order, which makes the header readable as a table
  // of contents; readers do not depend on it.
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t offset = 0;
  for (const SafetensorsWriteTensor& t : tensors) {
    FP4_CHECK(!t.name.empty() && t.name != "__metadata__",
              "{}: tensor name \"{}\" is reserved or empty, expected a tensor name", path, t.name);
    FP4_CHECK(names.insert(t.name).second, "{}: tensor '{}' is given twice", path, t.name);
    const int64_t bytes = expected_bytes(t, path);
    FP4_CHECK(static_cast<int64_t>(t.data.size()) == bytes,
              "{}: tensor '{}' ({} {}) has {} bytes of data, expected {}", path, t.name, t.dtype,
              ordered_json(t.shape).dump(), t.data.size(), bytes);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the header cannot be written as JSON ({}); expected UTF-8 names and metadata",
         path, e.what());
  }
  const size_t pad = (kDataAlignment - (8 + text.size()) % kDataAlignment) % kDataAlignment;
  text.append(pad, ' ');
  return text;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Closes the descriptor and removes the temporary file unless the write got to the rename.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  // close() reports deferred write errors (NFS, quotas), so it is checked, not left to the
  // destructor.
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void mark_renamed() { renamed_ = true; }

 private:
  std::string path_;
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace

void write_file_atomically(const std::string& path,
                           std::span<const std::span<const uint8_t>> chunks) {
  const std::string tmp = path + ".tmp";
  TempFile file(tmp);
  FP4_CHECK(file.fd() >= 0, "cannot create {} (to write {}): {}", tmp, path, std::strerror(errno));
  uint64_t written = 0;
  for (std::span<const uint8_t> chunk : chunks) {
    const uint8_t* p = chunk.data();
    size_t left = chunk.size();
    while (left > 0) {
      const ssize_t n = ::write(file.fd(), p, left);
      if (n < 0 && errno == EINTR) continue;
      // A write of 0 bytes makes no progress; treat it like the error it stands for.
      FP4_CHECK(n > 0, "cannot write {}: {} after {} bytes (disk full?)", path,
                n < 0 ? std::strerror(errno) : "no progress", written);
      p += n;
      left -= static_cast<size_t>(n);
      written += static_cast<uint64_t>(n);
    }
  }
  // Without the sync, a crash soon after the rename can leave the final name pointing at a
  // file whose data never reached the disk.
  FP4_CHECK(::fsync(file.fd()) == 0, "cannot flush {} to disk: {}", path, std::strerror(errno));
  FP4_CHECK(file.close() == 0, "cannot close {}: {}", path, std::strerror(errno));
  FP4_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp, path,
            std::strerror(errno));
  file.mark_renamed();
}

void write_text_file_atomically(const std::string& path, const std::string& text) {
  const std::span<const uint8_t> chunks[] = {bytes_of(text)};
  write_file_atomically(path, chunks);
}

void write_safetensors(const std::string& path, std::span<const SafetensorsWriteTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = header_text(tensors, metadata, path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  std::vector<std::span<const uint8_t>> chunks = {std::span<const uint8_t>(length), bytes_of(header)};
  for (const SafetensorsWriteTensor& t : tensors) chunks.push_back(t.data);
  write_file_atomically(path, chunks);
}

}  // namespace fp4::model
