#include "tools/fp4serve/convert_shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace fp4::convert {

std::string shard_header(const std::vector<ShardEntry>& entries) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (const ShardEntry& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + text;
}

ShardWriter::ShardWriter(std::string path, std::vector<ShardEntry> entries)
    : path_(std::move(path)), tmp_path_(path_ + ".tmp"), entries_(std::move(entries)) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FP4_CHECK(fd_ >= 0, "cannot create {}: {}", tmp_path_, std::strerror(errno));
  const std::string header = shard_header(entries_);
  try {
    write_all(reinterpret_cast<const uint8_t*>(header.data()), static_cast<int64_t>(header.size()));
  } catch (...) {
    // A constructor that throws runs no destructor: undo here what it would.
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    throw;
  }
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void ShardWriter::write_all(const uint8_t* data, int64_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, static_cast<size_t>(std::min<int64_t>(size, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    FP4_CHECK(n > 0, "cannot write {}: {}", tmp_path_, n < 0 ? std::strerror(errno) : "no progress");
    data += n;
    size -= n;
  }
}

void ShardWriter::append(std::span<const uint8_t> data) {
  if (next_ >= entries_.size()) fail_internal("{}: more tensors appended than planned", path_);
  const ShardEntry& e = entries_[next_++];
  if (static_cast<int64_t>(data.size()) != e.bytes) {
    fail_internal("{}: tensor {} has {} bytes, planned {}", path_, e.name, data.size(), e.bytes);
  }
  write_all(data.data(), static_cast<int64_t>(data.size()));
}

void ShardWriter::commit() {
  if (next_ != entries_.size()) fail_internal("{}: {} of {} tensors written", path_, next_, entries_.size());
  FP4_CHECK(::fsync(fd_) == 0, "cannot flush {} to disk: {}", tmp_path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  FP4_CHECK(::close(fd) == 0, "cannot close {}: {}", tmp_path_, std::strerror(errno));
  FP4_CHECK(std::rename(tmp_path_.c_str(), path_.c_str()) == 0, "cannot rename {} to {}: {}",
            tmp_path_, path_, std::strerror(errno));
  committed_ = true;
}

}  // namespace fp4::convert
