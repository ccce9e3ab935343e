#include "model/resident_weights.h"

#include "core/check.h"

namespace fp4::model {
namespace {

// Calls place(data, bytes) for every tensor of the model, once.
template <typename Place>
void visit_all(const ModelWeights& w, Place&& place) {
  auto floats = [&](const std::vector<float>& t) { place(t.data(), t.size() * sizeof(float)); };
  auto mlp = [&](const MlpWeights& m) {
    for (const LinearWeight* p : {&m.gate, &m.up, &m.down}) floats(p->w);
  };
  floats(w.embed.w);
  floats(w.final_norm);
  floats(w.lm_head.w);
  for (const LayerWeights& l : w.layers) {
    floats(l.input_norm);
    floats(l.post_attention_norm);
    const AttentionWeights& a = l.attn;
    for (const LinearWeight* p : {&a.q, &a.k, &a.v, &a.o, &a.index_q, &a.index_k}) floats(p->w);
    for (const std::vector<float>* p : {&a.q_norm, &a.k_norm, &a.index_q_norm, &a.index_k_norm}) floats(*p);
    mlp(l.mlp);
    const MoeWeights& moe = l.moe_weights;
    floats(moe.router.w);
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

}  // namespace

ResidentWeights::ResidentWeights(const ModelWeights& weights, Backend& backend)
    : host_(backend.uses_host_memory()) {
  if (host_) return;
  visit_all(weights, [&](const void* data, size_t bytes) { place(data, bytes, backend); });
}

void ResidentWeights::place(const void* host, size_t bytes, Backend& backend) {
  if (bytes == 0) return;
  Buffer<uint8_t> copy(backend, bytes);
  backend.copy_from_host(copy.data(), host, bytes);
  copies_.emplace(host, std::move(copy));
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
