#include "model/spec.h"

#include <limits>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/int_math.h"
#include "model/hf_config.h"

namespace mt {

namespace {

ModelSpec gpt2(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t n_positions, int64_t vocab_size) {
  return {.name = {},
          .arch = Arch::gpt2,
          .n_layer = n_layer,
          .n_head = n_head,
          .n_kv_head = n_head,
          .n_embd = n_embd,
          .intermediate_size = 4 * n_embd,
          .n_positions = n_positions,
          .vocab_size = vocab_size};
}

struct LlamaShape {
  int64_t n_layer, n_head, n_kv_head, n_embd, intermediate_size, n_positions, vocab_size;
  float eps, rope_theta;
  bool tied_head = false, qkv_bias = false;
};

ModelSpec llama(const LlamaShape& s) {
  return {.name = {},
          .arch = Arch::llama,
          .n_layer = s.n_layer,
          .n_head = s.n_head,
          .n_kv_head = s.n_kv_head,
          .n_embd = s.n_embd,
          .intermediate_size = s.intermediate_size,
          .n_positions = s.n_positions,
          .vocab_size = s.vocab_size,
          .ln_eps = s.eps,
          .rope_theta = s.rope_theta,
          .tied_head = s.tied_head,
          .qkv_bias = s.qkv_bias};
}

// Published shapes (the models' Hugging Face config.json), and small ones sized for tests and the 2-core
// demo.
const std::map<std::string, ModelSpec>& presets() {
  static const std::map<std::string, ModelSpec> table = {
      {"gpt2", gpt2(12, 12, 768, 1024, 50257)},
      {"gpt2-medium", gpt2(24, 16, 1024, 1024, 50257)},
      {"gpt2-large", gpt2(36, 20, 1280, 1024, 50257)},
      {"gpt2-xl", gpt2(48, 25, 1600, 1024, 50257)},
      {"gpt2-tiny", gpt2(2, 4, 64, 128, 256)},
      {"gpt2-demo", gpt2(4, 4, 128, 256, 50257)},
      {"llama2-7b", llama({32, 32, 32, 4096, 11008, 4096, 32000, 1e-5f, 1e4f})},
      {"llama2-13b", llama({40, 40, 40, 5120, 13824, 4096, 32000, 1e-5f, 1e4f})},
      {"llama2-70b", llama({80, 64, 8, 8192, 28672, 4096, 32000, 1e-5f, 1e4f})},
      {"llama3-8b", llama({32, 32, 8, 4096, 14336, 8192, 128256, 1e-5f, 5e5f})},
      {"llama3-70b", llama({80, 64, 8, 8192, 28672, 8192, 128256, 1e-5f, 5e5f})},
      {"qwen2.5-7b", llama({28, 28, 4, 3584, 18944, 32768, 152064, 1e-6f, 1e6f, false, true})},
      // Mistral 7B v0.1 attends within a 4096-token window: full attention is the same up to 4096 positions.
      {"mistral-7b", llama({32, 32, 8, 4096, 14336, 4096, 32000, 1e-5f, 1e4f})},
      // GQA (2 query heads per key/value head) at test and demo sizes; the demo one reads GPT-2 BPE tokens.
      {"llama-tiny", llama({2, 4, 2, 64, 176, 128, 256, 1e-5f, 1e4f})},
      {"llama-demo", llama({4, 4, 2, 128, 352, 256, 50257, 1e-5f, 1e4f})},
  };
  return table;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, p] : presets()) names.push_back(name);
  return names;
}

int64_t ModelSpec::num_parameters() const {
  const int64_t C = n_embd, I = intermediate_size;
  if (arch == Arch::gpt2) {
    const int64_t per_layer = 2 * C                // ln_1
                              + C * 3 * C + 3 * C  // attn.c_attn
                              + C * C + C          // attn.c_proj
                              + 2 * C              // ln_2
                              + C * I + I          // mlp.c_fc
                              + I * C + C;         // mlp.c_proj
    return vocab_size * C + n_positions * C + n_layer * per_layer + 2 * C;
  }
  const int64_t qkv = C + 2 * kv_dim();
  const int64_t per_layer = C                       // input_layernorm
                            + C * qkv               // q_proj, k_proj, v_proj
                            + (qkv_bias ? qkv : 0)  // their biases (Qwen2)
                            + C * C                 // o_proj
                            + C                     // post_attention_layernorm
                            + 3 * C * I;            // gate_proj, up_proj, down_proj
  return vocab_size * C * (tied_head ? 1 : 2) + n_layer * per_layer + C;
}

int64_t ModelSpec::padded_num_parameters() const {
  const int64_t tables = arch == Arch::llama && !tied_head ? 2 : 1;  // GPT-2's head is always tied
  return num_parameters() + (padded_vocab_size - vocab_size) * n_embd * tables;
}

ModelSpec resolve_model(const std::string& model, int64_t pad_vocab_multiple) {
  if (pad_vocab_multiple < 1) fail_usage("--make-vocab-size-divisible-by must be at least 1");
  const auto it = presets().find(model);
  ModelSpec spec = it != presets().end() ? it->second : read_model_config(model);
  spec.name = model;
  // Token ids are 32-bit: a vocabulary padded past them has rows no token can reach.
  const std::optional<int64_t> padded = product_if_fits(
      spec.vocab_size / pad_vocab_multiple + (spec.vocab_size % pad_vocab_multiple != 0), pad_vocab_multiple);
  if (!padded || *padded > std::numeric_limits<int32_t>::max())
    fail_usage("--make-vocab-size-divisible-by " + std::to_string(pad_vocab_multiple) +
               " pads the vocabulary of " + std::to_string(spec.vocab_size) +
               " past 2^31 - 1, the most 32-bit token ids reach");
  spec.padded_vocab_size = *padded;
  if (spec.n_embd % spec.n_head != 0)
    fail_usage("--model " + model + ": n_embd " + std::to_string(spec.n_embd) +
               " is not divisible by n_head " + std::to_string(spec.n_head));
  if (spec.n_head % spec.n_kv_head != 0)
    fail_usage("--model " + model + ": num_key_value_heads " + std::to_string(spec.n_kv_head) +
               " does not divide num_attention_heads " + std::to_string(spec.n_head));
  if (spec.arch == Arch::llama && spec.head_dim() % 2 != 0)
    fail_usage("--model " + model + ": rotary embeddings need an even head size, not " +
               std::to_string(spec.head_dim()));
  return spec;
}

}  // namespace mt
