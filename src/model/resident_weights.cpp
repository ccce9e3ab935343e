#include "model/resident_weights.h"

#include <functional>

#include "core/check.h"

namespace fp4::model {
namespace {

using Visit = std::function<void(const std::vector<float>&)>;

void visit_mlp(const MlpWeights& m, const Visit& visit) {
  visit(m.gate.w);
  visit(m.up.w);
  visit(m.down.w);
}

// Every tensor of the model, once.
void visit_all(const ModelWeights& w, const Visit& visit) {
  visit(w.embed.w);
  visit(w.final_norm);
  visit(w.lm_head.w);
  for (const LayerWeights& l : w.layers) {
    visit(l.input_norm);
    visit(l.post_attention_norm);
    const AttentionWeights& a = l.attn;
    for (const LinearWeight* p : {&a.q, &a.k, &a.v, &a.o, &a.index_q, &a.index_k}) visit(p->w);
    for (const std::vector<float>* p : {&a.q_norm, &a.k_norm, &a.index_q_norm, &a.index_k_norm}) visit(*p);
    visit_mlp(l.mlp, visit);
    const MoeWeights& moe = l.moe_weights;
    visit(moe.router.w);
    visit(moe.bias);
    for (const MlpWeights& e : moe.experts) visit_mlp(e, visit);
    visit_mlp(moe.shared, visit);
  }
}

}  // namespace

ResidentWeights::ResidentWeights(const ModelWeights& weights, Backend& backend)
    : host_(backend.uses_host_memory()) {
  if (host_) return;
  visit_all(weights, [&](const std::vector<float>& t) {
    if (t.empty()) return;
    copies_.emplace(t.data(), Buffer<float>(backend, t));
    bytes_ += t.size() * sizeof(float);
  });
}

const float* ResidentWeights::operator()(const std::vector<float>& host) const {
  if (host.empty()) return nullptr;
  if (host_) return host.data();
  const auto it = copies_.find(host.data());
  FP4_CHECK(it != copies_.end(), "a weight tensor of {} values was not placed on the backend",
            host.size());
  return it->second.data();
}

}  // namespace fp4::model
