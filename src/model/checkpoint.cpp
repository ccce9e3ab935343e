#include "model/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "model/json_object.h"
#include "model/safetensors.h"

namespace fp4::model {

namespace fs = std::filesystem;

// A whole file mapped read-only. Shared, not private: the pages are the page cache's own, so a
// checkpoint costs no memory beyond what the kernel already caches for the file.
struct Checkpoint::MappedFile {
  std::string path;
  const uint8_t* data = nullptr;
  size_t size = 0;

  explicit MappedFile(std::string file) : path(std::move(file)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FP4_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot stat {}: {}", path, std::strerror(err));
    }
    size = static_cast<size_t>(st.st_size);
    void* p = size > 0 ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
    const int err = errno;
    ::close(fd);  // the mapping keeps the file open
    FP4_CHECK(p != MAP_FAILED, "cannot map {} ({} bytes): {}", path, size, std::strerror(err));
    // Loads stream through each shard once: read ahead hard, drop pages behind.
    if (p != nullptr) ::madvise(p, size, MADV_SEQUENTIAL);
    data = static_cast<const uint8_t*>(p);
  }
  ~MappedFile() {
    if (data != nullptr) ::munmap(const_cast<uint8_t*>(data), size);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
};

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Whether a and b are at most k edits apart (Levenshtein), in O(|a| * k): only the diagonal
// band can stay within k.
bool within_edits(std::string_view a, std::string_view b, int k) {
  const int n = static_cast<int>(a.size()), m = static_cast<int>(b.size());
  if (std::abs(n - m) > k) return false;
  constexpr int kFar = 1 << 20;
  std::vector<int> prev(static_cast<size_t>(m) + 1, kFar), cur(prev.size(), kFar);
  for (int j = 0; j <= std::min(m, k); ++j) prev[static_cast<size_t>(j)] = j;
  for (int i = 1; i <= n; ++i) {
    std::fill(cur.begin(), cur.end(), kFar);
    if (i <= k) cur[0] = i;
    int best = cur[0];
    for (int j = std::max(1, i - k); j <= std::min(m, i + k); ++j) {
      const auto ju = static_cast<size_t>(j);
      const int sub = prev[ju - 1] + (a[static_cast<size_t>(i - 1)] != b[ju - 1] ? 1 : 0);
      cur[ju] = std::min({sub, prev[ju] + 1, cur[ju - 1] + 1});
      best = std::min(best, cur[ju]);
    }
    if (best > k) return false;
    std::swap(prev, cur);
  }
  return prev[static_cast<size_t>(m)] <= k;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "cannot open {}", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Checkpoint::Checkpoint(std::string dir, CheckpointOptions options)
    : dir_(std::move(dir)), options_(options) {
  std::error_code ec;
  FP4_CHECK(fs::is_directory(dir_, ec), "checkpoint {} is not a directory", dir_);
  const fs::path root(dir_);
  // The order Hugging Face loaders use: a single file wins over an index.
  if (fs::exists(root / kSingleFile, ec)) {
    add_shard((root / kSingleFile).string(), "");
  } else if (fs::exists(root / kIndexFile, ec)) {
    open_index((root / kIndexFile).string());
  } else {
    open_all();
  }
  for (const auto& [name, t] : tensors_) total_bytes_ += static_cast<int64_t>(t.bytes.size());
  std::FILE* stream = options_.progress_stream != nullptr ? options_.progress_stream : stderr;
  if (progress_enabled(options_.progress, total_bytes_, stream)) {
    progress_ = std::make_unique<ProgressBar>(fmt::format("loading {}", dir_), total_bytes_,
                                              stream);
  }
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

void Checkpoint::open_all() {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec)) {
      files.push_back(entry.path().string());
    }
  }
  FP4_CHECK(!ec, "cannot list checkpoint {}: {}", dir_, ec.message());
  FP4_CHECK(!files.empty(), "checkpoint {}: expected {}, {} with its shards, or *.safetensors "
            "files; found none", dir_, kSingleFile, kIndexFile);
  std::sort(files.begin(), files.end());
  for (const auto& f : files) add_shard(f, "");
}

void Checkpoint::open_index(const std::string& index_path) {
  const nlohmann::json root = parse_json_object(read_text(index_path), index_path);
  if (auto meta = root.find("metadata"); meta != root.end()) {
    FP4_CHECK(meta->is_object(), "{}: \"metadata\" is {}, expected an object", index_path,
              meta->type_name());
    index_metadata_ = *meta;
  }
  const auto map = root.find("weight_map");
  FP4_CHECK(map != root.end() && map->is_object(), "{}: expected a \"weight_map\" object of "
            "tensor name -> shard file", index_path);

  // Shards in order of first mention, each with one tensor to name if it is missing.
  std::vector<std::pair<std::string, std::string>> shards;
  for (const auto& [tensor, shard] : map->items()) {
    FP4_CHECK(shard.is_string(), "{}: weight_map[\"{}\"] is {}, expected a shard file name",
              index_path, tensor, shard.dump());
    const fs::path rel(shard.get<std::string>());
    const bool inside = !rel.empty() && rel.is_relative() &&
                        std::none_of(rel.begin(), rel.end(), [](const fs::path& p) {
                          return p == "..";
                        });
    FP4_CHECK(inside, "{}: weight_map[\"{}\"] is \"{}\", expected a file inside {}", index_path,
              tensor, rel.string(), dir_);
    const std::string path = (fs::path(dir_) / rel).string();
    const auto same = [&](const auto& s) { return s.first == path; };
    if (std::none_of(shards.begin(), shards.end(), same)) {
      shards.emplace_back(path, tensor);
    }
  }
  for (const auto& [path, tensor] : shards) {
    std::error_code ec;
    FP4_CHECK(fs::is_regular_file(path, ec), "{}: shard {} (which holds tensor '{}') is missing",
              index_path, path, tensor);
    add_shard(path, index_path);
  }

  for (const auto& [tensor, shard] : map->items()) {
    const std::string path = (fs::path(dir_) / shard.get<std::string>()).string();
    auto it = tensors_.find(tensor);
    FP4_CHECK(it != tensors_.end() && it->second.file == path,
              "{}: tensor '{}' is mapped to shard {}, whose header does not hold it{}",
              index_path, tensor, path,
              it == tensors_.end() ? std::string()
                                   : fmt::format(" (it is in {})", it->second.file));
  }
  for (const auto& [name, t] : tensors_) {
    FP4_CHECK(map->contains(name), "{}: tensor '{}' is in shard {} but not in the weight_map; "
              "expected every shard tensor to be listed", index_path, name, t.file);
  }
}

void Checkpoint::add_shard(const std::string& path, const std::string& index_path) {
  const SafetensorsHeader header = read_safetensors_header(path);
  auto file = std::make_unique<MappedFile>(path);
  FP4_CHECK(static_cast<int64_t>(file->size) == header.file_bytes,
            "{} changed size while being opened ({} bytes, then {})", path, header.file_bytes,
            file->size);
  const int64_t data_start = 8 + header.header_bytes;
  for (const SafetensorsTensor& t : header.tensors) {
    // The header reader checked these against the file it read; the mapping is what we index.
    int64_t end = 0;
    FP4_CHECK(t.begin >= 0 && t.begin <= t.end &&
                  !__builtin_add_overflow(data_start, t.end, &end) &&
                  end <= static_cast<int64_t>(file->size),
              "{}: tensor '{}' claims bytes [{}, {}) of the data section, outside the {}-byte "
              "file", path, t.name, t.begin, t.end, file->size);
    TensorRef ref;
    ref.name = t.name;
    ref.dtype = t.dtype;
    ref.shape = t.shape;
    ref.bytes = std::span<const uint8_t>(file->data + data_start + t.begin,
                                         static_cast<size_t>(t.bytes()));
    ref.file = file->path;
    auto [it, fresh] = tensors_.try_emplace(t.name, std::move(ref));
    FP4_CHECK(fresh, "tensor '{}' is in both {} and {}{}; expected each tensor in one file",
              t.name, it->second.file, path,
              index_path.empty() ? std::string() : fmt::format(" (index {})", index_path));
  }
  shards_.push_back(std::move(file));
}

std::vector<std::string_view> Checkpoint::names() const {
  std::vector<std::string_view> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.emplace_back(name);
  return out;
}

std::vector<std::string_view> Checkpoint::files() const {
  std::vector<std::string_view> out;
  for (const auto& f : shards_) out.emplace_back(f->path);
  return out;
}

const nlohmann::json* Checkpoint::index_metadata() const {
  return index_metadata_.is_object() ? &index_metadata_ : nullptr;
}

const TensorRef* Checkpoint::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorRef& Checkpoint::get(std::string_view name) const {
  if (const TensorRef* t = find(name)) return *t;
  // The usual near miss is a prefix: VL checkpoints put "language_model." in front of the
  // text model's names. Then ".weight" forgotten or added, then a typo.
  static constexpr std::string_view kPrefixes[] = {"language_model.model.",
                                                   "model.language_model.", "language_model.",
                                                   "model."};
  std::string_view base = name;
  for (std::string_view p : kPrefixes) {
    if (base.starts_with(p)) {
      base.remove_prefix(p.size());
      break;
    }
  }
  std::vector<std::string> candidates = {std::string(base)};
  for (std::string_view p : kPrefixes) candidates.push_back(std::string(p) + std::string(base));
  for (size_t i = 0, n = candidates.size(); i < n; ++i) {
    const std::string& c = candidates[i];
    candidates.push_back(c.ends_with(".weight") ? c.substr(0, c.size() - 7) : c + ".weight");
  }
  std::string suggestion;
  for (const std::string& c : candidates) {
    if (c != name && tensors_.contains(c)) {
      suggestion = c;
      break;
    }
  }
  if (suggestion.empty()) {
    for (const auto& [other, t] : tensors_) {
      if (within_edits(name, other, 2)) {
        suggestion = other;
        break;
      }
    }
  }
  fail("tensor '{}' not found in checkpoint {} ({} tensors in {} file{}){}", name, dir_,
       tensors_.size(), shards_.size(), shards_.size() == 1 ? "" : "s",
       suggestion.empty() ? std::string() : fmt::format("; did you mean '{}'?", suggestion));
}

WeightLayout Checkpoint::layout(std::string_view name) const {
  return resolve_layout(get(name), [this](std::string_view n) { return find(n); });
}

std::vector<float> Checkpoint::load_f32(std::string_view name,
                                        std::span<const int64_t> expected_shape) const {
  const WeightLayout l = layout(name);
  check_logical_shape(l, expected_shape);
  int64_t n = 1;
  for (int64_t d : expected_shape) {
    FP4_CHECK(!__builtin_mul_overflow(n, d, &n), "tensor '{}': shape {} has more elements than "
              "a 64-bit count holds", name, shape_string(expected_shape));
  }
  std::vector<float> out(static_cast<size_t>(n));
  decode_weight(l, expected_shape, out, options_.num_threads);
  if (progress_) progress_->advance(l.stored_bytes());
  return out;
}

std::optional<Checkpoint::Nvfp4View> Checkpoint::nvfp4_view(std::string_view name, int64_t out,
                                                            int64_t in) const {
  const WeightLayout l = layout(name);
  if (l.format != StorageFormat::kNvfp4) return std::nullopt;
  const std::vector<int64_t> shape = {out, in};
  check_logical_shape(l, shape);
  FP4_CHECK(in % 16 == 0 && l.scale->shape == std::vector<int64_t>({out, in / 16}),
            "tensor '{}': NVFP4 of logical shape {} with scales {}; kernels reading NVFP4 as "
            "stored need an inner dimension that is a multiple of 16 and scales of shape {}",
            name, shape_string(shape), shape_string(l.scale->shape),
            shape_string(std::vector<int64_t>{out, in / 16}));
  if (progress_) progress_->advance(l.stored_bytes());
  return Nvfp4View{.codes = l.weight->bytes, .scales = l.scale->bytes,
                   .global_scale = read_f32_scalar(*l.scale_2)};
}

std::string_view Checkpoint::describe(std::string_view name) const {
  return storage_format_name(layout(name).format);
}

std::optional<float> Checkpoint::input_scale(std::string_view weight_name) const {
  const std::optional<std::string> module = weight_module(weight_name);
  const TensorRef* t = module ? find(*module + ".input_scale") : nullptr;
  if (t == nullptr) return std::nullopt;
  return read_f32_scalar(*t);
}

void Checkpoint::finish_progress() const {
  if (progress_) progress_->finish();
}

}  // namespace fp4::model
