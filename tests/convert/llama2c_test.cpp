#include "tools/fp4serve/llama2c.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/config.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

namespace fp4::convert {
namespace {

namespace fs = std::filesystem;

// Header fields as stored; vocab < 0 means an unshared classifier.
struct Dims {
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
  int64_t hd() const { return dim / heads; }
  int64_t kv() const { return kv_heads * hd(); }
  int64_t v() const { return std::abs(vocab); }
};

// Float offsets written out from the format description, independently of llama2c_layout.
int64_t wq_offset(const Dims& d) { return d.v() * d.dim + int64_t{d.layers} * d.dim; }
int64_t wk_offset(const Dims& d) { return wq_offset(d) + int64_t{d.layers} * d.dim * d.dim; }
int64_t w2_offset(const Dims& d) {
  return wk_offset(d) + int64_t{d.layers} * (2 * d.kv() * d.dim + d.dim * d.dim + d.dim +
                                             int64_t{d.hidden} * d.dim);
}
int64_t float_count(const Dims& d) {
  return w2_offset(d) + 2 * int64_t{d.layers} * d.hidden * d.dim + d.dim + d.seq * d.hd() +
         (d.vocab < 0 ? d.v() * d.dim : 0);
}

Dims random_dims(std::mt19937_64& rng, bool shared) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kv_heads = pick(1, 3), heads = kv_heads * pick(1, 3), hd = 2 * pick(1, 4);
  const int vocab = pick(3, 40);
  return {heads * hd, pick(1, 40), pick(1, 3), heads, kv_heads, shared ? vocab : -vocab, pick(1, 9)};
}

class Llama2cTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("fp4serve_l2c_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  static std::string header(const Dims& d) {
    std::string s(28, '\0');
    std::memcpy(s.data(), &d, 28);
    return s;
  }
  // A checkpoint of random floats; returns its path and fills `floats`.
  std::string checkpoint(const Dims& d, std::mt19937_64& rng, std::vector<float>& floats) {
    floats = testing::random_floats(static_cast<size_t>(float_count(d)),
                                    testing::Distribution::kGaussian, rng);
    std::string bytes = header(d);
    bytes.append(reinterpret_cast<const char*>(floats.data()), floats.size() * 4);
    return write("model.bin", bytes);
  }

  fs::path dir_;
};

TEST_F(Llama2cTest, ReadsRandomCheckpoints) {
  auto rng = testing::seeded_rng(1);
  for (int round = 0; round < 12; ++round) {
    const Dims d = random_dims(rng, round % 2 == 0);
    std::vector<float> floats;
    const Llama2cCheckpoint ck = read_llama2c_checkpoint(checkpoint(d, rng, floats));
    EXPECT_EQ(ck.config.dim, d.dim);
    EXPECT_EQ(ck.config.hidden_dim, d.hidden);
    EXPECT_EQ(ck.config.n_layers, d.layers);
    EXPECT_EQ(ck.config.n_heads, d.heads);
    EXPECT_EQ(ck.config.n_kv_heads, d.kv_heads);
    EXPECT_EQ(ck.config.vocab_size, d.v());
    EXPECT_EQ(ck.config.seq_len, d.seq);
    EXPECT_EQ(ck.config.shared_classifier, d.vocab > 0);
    EXPECT_EQ(ck.floats, floats);
    const std::vector<Llama2cArray> layout = llama2c_layout(ck.config);
    EXPECT_EQ(layout.back().name, d.vocab > 0 ? "freq_cis_imag" : "wcls");
    const auto w2 = std::find_if(layout.begin(), layout.end(), [](auto& a) { return a.name == "w2"; });
    EXPECT_EQ(w2->offset, w2_offset(d));
  }
}

TEST_F(Llama2cTest, RefusesAFileWhoseSizeDisagreesWithItsHeader) {
  auto rng = testing::seeded_rng(2);
  const Dims d = random_dims(rng, false);
  std::vector<float> floats;
  const std::string whole = checkpoint(d, rng, floats);
  std::string bytes;
  {
    std::ifstream in(whole, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string expected = std::to_string(28 + 4 * float_count(d));
  // Cut inside w2, at a random byte of it.
  const int64_t w2_begin = 28 + 4 * w2_offset(d), w2_bytes = 4 * int64_t{d.hidden} * d.dim * d.layers;
  const int64_t cut = w2_begin + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(w2_bytes - 1));
  const std::string cut_path = write("cut.bin", bytes.substr(0, static_cast<size_t>(cut)));
  testing::expect_error([&] { read_llama2c_checkpoint(cut_path); },
                        {cut_path, "ends at byte " + std::to_string(cut), "'w2'", expected});
  const std::string long_path = write("long.bin", bytes + "abcd");
  testing::expect_error([&] { read_llama2c_checkpoint(long_path); },
                        {long_path, "4 bytes follow", "'wcls'", expected});
  const std::string tiny = write("tiny.bin", bytes.substr(0, 27));
  testing::expect_error([&] { read_llama2c_checkpoint(tiny); }, {tiny, "27 bytes", "28-byte header"});
  const std::string missing = (dir_ / "missing.bin").string();
  testing::expect_error([&] { read_llama2c_checkpoint(missing); }, {missing, "cannot read"});
}

TEST_F(Llama2cTest, RefusesHeadersWithNonPositiveOrInconsistentDims) {
  const Dims good{64, 172, 5, 8, 4, 512, 512};
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int field = 0; field < 7; ++field) {
    for (int32_t value : {0, -3}) {
      if (field == 5 && value != 0) continue;  // a negative vocab_size is allowed
      Dims d = good;
      reinterpret_cast<int32_t*>(&d)[field] = value;
      const std::string path = write("bad.bin", header(d));
      testing::expect_error([&] { read_llama2c_checkpoint(path); },
                            {path, names[field], "offset " + std::to_string(4 * field),
                             "is " + std::to_string(value)});
    }
  }
  auto refuse = [&](const Dims& d, std::initializer_list<std::string_view> parts) {
    const std::string path = write("bad.bin", header(d));
    const std::string message = testing::expect_error([&] { read_llama2c_checkpoint(path); }, parts);
    EXPECT_NE(message.find(path), std::string::npos) << message;
  };
  refuse({0x616b3432, 2, 0, 0, 0, 0, 0}, {"ak42", "version-0"});
  refuse({66, 172, 5, 8, 4, 512, 512}, {"dim 66", "n_heads 8"});
  refuse({64, 172, 5, 8, 3, 512, 512}, {"n_heads 8", "n_kv_heads 3"});
  refuse({24, 172, 5, 8, 4, 512, 512}, {"head size", "3", "even"});
  const int32_t big = 1 << 30;  // n_layers x dim x dim = 2^90 floats in wq
  refuse({big, big, big, 2, 1, big, big}, {"dim 1073741824", "64-bit count"});
}

// RoPE on one head: adjacent pairs (2j, 2j+1) or half-split pairs (j, j + hd/2), in double.
std::vector<double> rope(std::vector<double> x, int64_t pos, bool half_split) {
  const int64_t hd = static_cast<int64_t>(x.size()), half = hd / 2;
  for (int64_t j = 0; j < half; ++j) {
    const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * j / hd);
    const int64_t a = half_split ? j : 2 * j, b = half_split ? j + half : 2 * j + 1;
    const double xa = x[a], xb = x[b];
    x[a] = xa * std::cos(angle) - xb * std::sin(angle);
    x[b] = xa * std::sin(angle) + xb * std::cos(angle);
  }
  return x;
}

TEST(PermuteRopeRows, HalfSplitRopeOnPermutedRowsEqualsAdjacentPairRope) {
  auto rng = testing::seeded_rng(3);
  const int64_t heads = 3, hd = 8, in = 5;
  const std::vector<float> wq = testing::random_floats(heads * hd * in, testing::Distribution::kGaussian, rng);
  const std::vector<float> wk = testing::random_floats(heads * hd * in, testing::Distribution::kGaussian, rng);
  const std::vector<float> x = testing::random_floats(in, testing::Distribution::kGaussian, rng);
  const std::vector<float> y = testing::random_floats(in, testing::Distribution::kGaussian, rng);
  const std::vector<float> pq = permute_rope_rows(wq, heads, hd, in);
  const std::vector<float> pk = permute_rope_rows(wk, heads, hd, in);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < hd / 2; ++j) {
      for (int64_t c = 0; c < in; ++c) {
        EXPECT_EQ(pq[((h * hd) + j) * in + c], wq[((h * hd) + 2 * j) * in + c]);
        EXPECT_EQ(pq[((h * hd) + hd / 2 + j) * in + c], wq[((h * hd) + 2 * j + 1) * in + c]);
      }
    }
  }
  auto project = [&](const std::vector<float>& w, const std::vector<float>& v, int64_t h) {
    std::vector<double> out(hd, 0.0);
    for (int64_t r = 0; r < hd; ++r) {
      for (int64_t c = 0; c < in; ++c) out[r] += double{w[(h * hd + r) * in + c]} * v[c];
    }
    return out;
  };
  for (int64_t pos : {0, 1, 7, 300}) {
    for (int64_t h = 0; h < heads; ++h) {
      const auto q0 = rope(project(wq, x, h), pos, false), k0 = rope(project(wk, y, h), pos, false);
      const auto q1 = rope(project(pq, x, h), pos, true), k1 = rope(project(pk, y, h), pos, true);
      double s0 = 0, s1 = 0, mag = 0;
      for (int64_t i = 0; i < hd; ++i) s0 += q0[i] * k0[i], s1 += q1[i] * k1[i], mag += std::abs(q0[i] * k0[i]);
      // The same products summed in another order: |error| <= hd * 2^-53 * sum |terms| per sum,
      // doubled for the two sums; 1e-14 * mag covers it with room.
      EXPECT_NEAR(s0, s1, 1e-14 * mag) << "head " << h << " pos " << pos;
    }
  }
}

TEST_F(Llama2cTest, MapsEveryArrayToItsHuggingFaceTensor) {
  auto rng = testing::seeded_rng(4);
  for (bool shared : {true, false}) {
    const Dims d = random_dims(rng, shared);
    std::vector<float> floats;
    const HfWeights w = hf_llama_weights(read_llama2c_checkpoint(checkpoint(d, rng, floats)));
    ASSERT_EQ(w.tensors.size(), size_t(9 * d.layers + (shared ? 2 : 3)));
    auto find = [&](const std::string& name) {
      const auto t = std::find_if(w.tensors.begin(), w.tensors.end(), [&](auto& x) { return x.name == name; });
      EXPECT_NE(t, w.tensors.end()) << name;
      return w.values(*t);
    };
    auto expect_slice = [&](const std::string& name, int64_t offset, int64_t count) {
      const std::span<const float> got = find(name);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), floats.begin() + offset, floats.begin() + offset + count)) << name;
      EXPECT_EQ(static_cast<int64_t>(got.size()), count) << name;
    };
    expect_slice("model.embed_tokens.weight", 0, d.v() * d.dim);
    const int64_t L = d.layers, D = d.dim, H = d.hidden, KV = d.kv();
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      expect_slice(p + "input_layernorm.weight", d.v() * D + l * D, D);
      const auto q = std::span(floats).subspan(wq_offset(d) + l * D * D, D * D);
      const auto k = std::span(floats).subspan(wk_offset(d) + l * KV * D, KV * D);
      const std::vector<float> pq = permute_rope_rows(q, d.heads, d.hd(), D);
      const std::vector<float> pk = permute_rope_rows(k, d.kv_heads, d.hd(), D);
      EXPECT_TRUE(std::ranges::equal(find(p + "self_attn.q_proj.weight"), pq));
      EXPECT_TRUE(std::ranges::equal(find(p + "self_attn.k_proj.weight"), pk));
      const int64_t wv = wk_offset(d) + L * KV * D, wo = wv + L * KV * D, rms_ffn = wo + L * D * D;
      const int64_t w1 = rms_ffn + L * D, w3 = w2_offset(d) + L * D * H;
      expect_slice(p + "self_attn.v_proj.weight", wv + l * KV * D, KV * D);
      expect_slice(p + "self_attn.o_proj.weight", wo + l * D * D, D * D);
      expect_slice(p + "post_attention_layernorm.weight", rms_ffn + l * D, D);
      expect_slice(p + "mlp.gate_proj.weight", w1 + l * H * D, H * D);
      expect_slice(p + "mlp.down_proj.weight", w2_offset(d) + l * D * H, D * H);
      expect_slice(p + "mlp.up_proj.weight", w3 + l * H * D, H * D);
    }
    const int64_t final_norm = w2_offset(d) + 2 * L * H * D;
    expect_slice("model.norm.weight", final_norm, D);
    if (!shared) expect_slice("lm_head.weight", final_norm + D + d.seq * d.hd(), d.v() * D);
  }
}

TEST(HfLlamaConfig, IsReadByTheModelConfigParser) {
  const Llama2cConfig c{64, 172, 5, 8, 4, 512, 256, false};
  const model::ModelConfig m = model::parse_model_config(hf_llama_config(c).dump(), "config.json");
  EXPECT_EQ(m.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.hidden_size, 64);
  EXPECT_EQ(m.dense_intermediate_size, 172);
  EXPECT_EQ(m.num_layers, 5);
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 8);
  EXPECT_EQ(m.vocab_size, 512);
  EXPECT_EQ(m.max_position_embeddings, 256);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_EQ(m.rms_norm_eps, 1e-5);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_EQ(m.rotary_dim, 8);
  EXPECT_FALSE(m.is_moe());
}

}  // namespace
}  // namespace fp4::convert
