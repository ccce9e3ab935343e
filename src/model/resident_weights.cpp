#include "model/resident_weights.h"

#include <atomic>
#include <bit>

#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/mxfp8.h"

namespace fp4::model {
namespace {

// Calls place(data, bytes) for every tensor of the model but the projections, and
// linear(w, gathered) for every projection, once each (gathered: the embedding, read by rows).
template <typename Place, typename Linear>
void visit_all(const ModelWeights& w, Place&& place, Linear&& linear) {
  auto floats = [&](const std::vector<float>& t) { place(t.data(), t.size() * sizeof(float)); };
  auto mlp = [&](const MlpWeights& m) {
    for (const LinearWeight* p : {&m.gate, &m.up, &m.down}) linear(*p, false);
  };
  linear(w.embed, true);
  floats(w.final_norm);
  linear(w.lm_head, false);
  for (const LayerWeights& l : w.layers) {
    floats(l.input_norm);
    floats(l.post_attention_norm);
    const AttentionWeights& a = l.attn;
    for (const LinearWeight* p : {&a.q, &a.k, &a.v, &a.o, &a.index_q, &a.index_k}) linear(*p, false);
    for (const std::vector<float>* p : {&a.q_norm, &a.k_norm, &a.index_q_norm, &a.index_k_norm}) floats(*p);
    mlp(l.mlp);
    const MoeWeights& moe = l.moe_weights;
    linear(moe.router, false);
    floats(moe.bias);
    for (const Nvfp4Experts* s : {&moe.gate, &moe.up, &moe.down}) {
      place(s->values.data(), s->values.size());
      place(s->scales.data(), s->scales.size());
      floats(s->global_scales);
    }
    for (const MlpWeights& e : moe.experts) mlp(e);
    mlp(moe.shared);
  }
}

bool all_bf16(const std::vector<float>& values) {
  for (float v : values) {
    if ((std::bit_cast<uint32_t>(v) & 0xFFFFu) != 0) return false;
  }
  return true;
}

// The MXFP8 codes and scales of a weight whose every block along its rows is exactly MXFP8;
// false as soon as one is not. On all threads: a checkpoint's MXFP8 projections are billions of
// values, about 4 ns each to check on one core.
bool as_mxfp8(const LinearWeight& w, std::vector<uint8_t>& codes, std::vector<uint8_t>& scales) {
  if (w.in % kMxfp8BlockElems != 0) return false;
  const auto blocks = static_cast<int64_t>(w.w.size() / kMxfp8BlockElems);
  // A weight that is not MXFP8 (a BF16 one) fails on its first block, before any threads start.
  uint8_t first[kMxfp8BlockElems], first_scale = 0;
  if (blocks == 0 || !mxfp8_quantize_block_exact(w.w.data(), first, first_scale)) return false;
  codes.resize(w.w.size());
  scales.resize(static_cast<size_t>(blocks));
  std::atomic<bool> exact{true};
  parallel_for(blocks, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end && exact.load(std::memory_order_relaxed); ++b) {
      if (!mxfp8_quantize_block_exact(w.w.data() + b * kMxfp8BlockElems, codes.data() + b * kMxfp8BlockElems,
                                      scales[b])) {
        exact.store(false, std::memory_order_relaxed);
      }
    }
  });
  return exact.load();
}

}  // namespace

ResidentWeights::ResidentWeights(const ModelWeights& weights, Backend& backend, Mxfp8 mxfp8)
    : host_(backend.uses_host_memory()), mxfp8_(mxfp8) {
  place_new(weights, backend);
}

void ResidentWeights::place_new(const ModelWeights& weights, Backend& backend) {
  if (host_) return;
  visit_all(weights, [&](const void* data, size_t bytes) { place(data, bytes, backend); },
            [&](const LinearWeight& w, bool gathered) { place_linear(w, gathered, backend); });
}

void ResidentWeights::place_linear(const LinearWeight& w, bool gathered, Backend& backend) {
  const void* key = w.w.data();
  if (w.w.empty() || copies_.contains(key) || bf16_copies_.contains(key) || mxfp8_copies_.contains(key)) return;
  if (!all_bf16(w.w)) {
    place(key, w.w.size() * sizeof(float), backend);
    return;
  }
  std::vector<uint8_t> codes, scales;
  if (!gathered && mxfp8_ == Mxfp8::kHold && as_mxfp8(w, codes, scales)) {
    device_bytes_ += static_cast<int64_t>(codes.size() + scales.size());
    mxfp8_copies_.emplace(key, Mxfp8Copy{Buffer<uint8_t>(backend, codes), Buffer<uint8_t>(backend, scales)});
    return;
  }
  std::vector<uint16_t> bits(w.w.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(w.w[i]) >> 16);
  bf16_copies_.emplace(key, Buffer<uint16_t>(backend, bits));
  device_bytes_ += static_cast<int64_t>(bits.size() * sizeof(uint16_t));
}

ResidentWeights::Linear ResidentWeights::operator()(const LinearWeight& w) const {
  if (w.w.empty()) return {};
  if (!host_) {
    if (const auto it = bf16_copies_.find(w.w.data()); it != bf16_copies_.end()) return {.w_bf16 = it->second.data()};
    if (const auto it = mxfp8_copies_.find(w.w.data()); it != mxfp8_copies_.end()) {
      return {.w_e4m3 = it->second.codes.data(), .w_scales = it->second.scales.data()};
    }
  }
  return {.w = find<float>(w.w)};
}

void ResidentWeights::place(const void* host, size_t bytes, Backend& backend) {
  if (bytes == 0 || copies_.contains(host)) return;
  Buffer<uint8_t> copy(backend, bytes);
  backend.copy_from_host(copy.data(), host, bytes);
  copies_.emplace(host, std::move(copy));
  device_bytes_ += static_cast<int64_t>(bytes);
}

template <typename T>
const T* ResidentWeights::find(const std::vector<T>& host) const {
  if (host.empty()) return nullptr;
  if (host_) return host.data();
  const auto it = copies_.find(host.data());
  FP4_CHECK(it != copies_.end(), "a weight tensor of {} values was not placed on the backend",
            host.size());
  return reinterpret_cast<const T*>(it->second.data());
}

template const float* ResidentWeights::find<float>(const std::vector<float>&) const;
template const uint8_t* ResidentWeights::find<uint8_t>(const std::vector<uint8_t>&) const;

}  // namespace fp4::model
