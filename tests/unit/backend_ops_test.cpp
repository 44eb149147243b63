// Every op kind through Backend::run on small awkward shapes, in every model-state layout, against the CPU
// at its generic level (backend_ops.h says how). The backend under test is a parameter: today the CPU at this
// process's level; a CUDA build adds its backend to backends_under_test() and runs the same cases.
#include "backend_ops.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <set>
#include <string_view>
#include <variant>

#include "devices/devices.h"

namespace mt::backend_ops {

namespace {

// The models the cases read their sizes from. GPT-2's kind: 3 heads of 12 (C = 36, not a multiple of 16),
// learned positions. LLaMA's: 4 query heads on 2 key/value heads of 6 (GQA), rotary positions. Both with a
// vocabulary of 45 padded to 48, so the head has padding columns and splits in two.
ModelSpec model(Arch arch, int64_t C, int64_t heads, int64_t kv_heads) {
  return {.name = "backend-ops",
          .arch = arch,
          .n_layer = 1,
          .n_head = heads,
          .n_kv_head = kv_heads,
          .n_embd = C,
          .intermediate_size = 4 * C,
          .n_positions = 16,
          .vocab_size = 45,
          .padded_vocab_size = 48,
          .tied_head = arch == Arch::gpt2};
}
const ModelSpec kGpt2 = model(Arch::gpt2, 36, 3, 3);
const ModelSpec kLlama = model(Arch::llama, 24, 4, 2);
const ModelSpec kOddWidth = model(Arch::gpt2, 37, 1, 1);

// Tensor parallel: the second of two ranks, so every offset into the whole tensor (vocab_begin, the heads,
// the residual's rows) is non-zero.
StepConfig tp_rank1(StepConfig step) {
  step.tp = 2;
  step.tp_rank = 1;
  return step;
}

// The rows of the whole vocabulary this rank's embedding or head holds start there.
int64_t vocab_begin(const GraphBuilder& g, const ModelSpec& spec) {
  return g.step().tp_rank * (spec.padded_vocab_size / g.step().tp);
}

int vocab_param(GraphBuilder& g, const std::string& name, const ModelSpec& spec) {
  const std::vector<int64_t> whole{spec.padded_vocab_size, spec.n_embd};
  return g.step().tp > 1 ? g.param(name, g.shard(whole, 0, {whole[0]})) : g.param(name, whole);
}

OpCase embedding_case(std::string name, const ModelSpec& spec, StepConfig step) {
  return {std::move(name), spec, step, [](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const int64_t C = b.spec.n_embd, begin = vocab_begin(g, b.spec);
            const int wte = vocab_param(g, "wte", b.spec);
            const int wpe = b.spec.arch == Arch::gpt2 ? g.param("wpe", {b.spec.n_positions, C}) : -1;
            const int out = g.act("x", C), dout = g.act("x.grad", C);
            const BatchTensors& batch = g.batch();
            g.op("embedding", ops::Embedding{.out = out,
                                             .wte = wte,
                                             .wpe = wpe,
                                             .tokens = batch.tokens,
                                             .positions = batch.positions,
                                             .vocab_begin = begin});
            g.op("embedding.backward", ops::EmbeddingBackward{.wte = wte,
                                                              .wpe = wpe,
                                                              .dout = dout,
                                                              .tokens = batch.tokens,
                                                              .positions = batch.positions,
                                                              .vocab_begin = begin});
          }};
}

// The norm and its backward, which accumulates into the input's gradient.
OpCase norm_case(std::string name, NormKind kind, int64_t C, StepConfig step) {
  return {std::move(name), kOddWidth, step, [kind, C](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const NormParams p{.weight = g.param("norm.weight", {C}),
                               .bias = kind == NormKind::layernorm ? g.param("norm.bias", {C}) : -1};
            const int x = g.act("x", C), dx = g.act("x.grad", C), dy = g.act("norm.out.grad", C);
            const NormActs acts = g.norm(kind, "norm", "", x, p, C);
            g.norm_backward(kind, "norm.backward", x, p, acts, dx, dy);
          }};
}

struct Product {
  int64_t in, out;
  bool out_in, bias, residual, accumulate;
};

// A product and its backward; a residual of fewer rows than the output is a sequence-parallel rank's.
OpCase linear_case(std::string name, Product s, StepConfig step) {
  return {std::move(name), kOddWidth, step, [s](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const LinearParams p{.weight = g.param("fc.weight", s.out_in ? std::vector{s.out, s.in}
                                                                         : std::vector{s.in, s.out}),
                                 .bias = s.bias ? g.param("fc.bias", {s.out}) : -1};
            const int x = g.act("x", s.in), y = g.act("y", s.out), dx = g.act("x.grad", s.in);
            const int dy = g.act("y.grad", s.out), residual = s.residual ? g.residual_act("r", s.out) : -1;
            g.linear("fc", "", x, y, residual, p, s.out_in);
            g.linear_backward("fc.backward", x, p, {}, dx, dy, s.out_in);
            std::get<ops::LinearBackward>(b.model.graph.ops.back().args).accumulate = s.accumulate;
          }};
}

// QLoRA: a frozen weight stored quantized in parts (a fused projection's Hugging Face tensors, each of whole
// stored rows, none a whole number of 64-element blocks), with a frozen bias and adapters with dropout,
// dequantized a tile at a time (the CPU's of 128 columns, the GPU's of 1024).
struct QuantizedProduct {
  BaseQuantConfig quant;
  bool out_in;
  int64_t in, out;
  std::vector<int64_t> part_rows;  // stored rows (out for [out, in], in for [in, out]) of each part
  bool residual = false, accumulate = false;
};

// One adapter per part's output columns for [out, in]; one on 8 columns from column 3 for [in, out].
std::vector<LoraAdapter> quantized_product_adapters(GraphBuilder& g, const QuantizedProduct& s) {
  if (!s.out_in) return {g.lora_adapter("layer.part0", s.in, 8, 3)};
  std::vector<LoraAdapter> adapters;
  int64_t column = 0;
  for (const int64_t rows : s.part_rows) {
    adapters.push_back(g.lora_adapter("layer.part" + std::to_string(adapters.size()), s.in, rows, column));
    column += rows;
  }
  return adapters;
}

OpCase qlora_case(std::string name, QuantizedProduct s, StepConfig step) {
  step.lora = {.rank = 3, .alpha = 6.0f, .dropout = 0.25f};
  step.base_quant = s.quant;
  return {std::move(name), kLlama, step, [s](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const int w =
                g.param("layer.proj.weight", s.out_in ? std::vector{s.out, s.in} : std::vector{s.in, s.out});
            QuantizedStorage storage{
                .format = s.quant.weight_format(), .double_quant = s.quant.double_quant, .parts = {}};
            for (const int64_t rows : s.part_rows) storage.parts.push_back(rows * (s.out_in ? s.in : s.out));
            b.model.graph.table[w].quantized = std::move(storage);
            const LinearParams p{.weight = w,
                                 .bias = g.param("layer.proj.bias", {s.out}),
                                 .adapters = quantized_product_adapters(g, s)};
            const int x = g.act("x", s.in), y = g.act("y", s.out), dx = g.act("x.grad", s.in);
            const int dy = g.act("y.grad", s.out), residual = s.residual ? g.residual_act("r", s.out) : -1;
            const LoraActs hidden = g.linear("proj", "", x, y, residual, p, s.out_in);
            g.linear_backward("proj.backward", x, p, hidden, dx, dy, s.out_in);
            for (Op& op : b.model.graph.ops)
              if (auto* backward = std::get_if<ops::LinearBackward>(&op.args))
                backward->accumulate = s.accumulate;
          }};
}

std::vector<OpCase> qlora_cases() {
  const StepConfig b2t5{.batch = 2, .seq_len = 5, .seed = 11};
  const BaseQuantConfig nf4{.format = BaseQuant::nf4}, int8{.format = BaseQuant::int8};
  const BaseQuantConfig nf4_fp32{.format = BaseQuant::nf4, .double_quant = false};
  const BaseQuantConfig int8_fp32{.format = BaseQuant::int8, .double_quant = false};
  return {
      qlora_case("qlora: nf4 [out, in] of parts of 13300 and 5852 elements, 8-bit absmaxes",
                 {.quant = nf4, .out_in = true, .in = 133, .out = 144, .part_rows = {100, 44}}, b2t5),
      qlora_case("qlora: int8 [in, out], fp32 absmaxes, 37 -> 1029: two GPU tiles, nine CPU ones",
                 {.quant = int8_fp32, .out_in = false, .in = 37, .out = 1029, .part_rows = {37}}, b2t5),
      qlora_case("qlora: nf4 [in, out] of parts of 540 and 675 elements (odd), fp32 absmaxes, B=1 T=1",
                 {.quant = nf4_fp32, .out_in = false, .in = 45, .out = 27, .part_rows = {20, 25}},
                 {.batch = 1, .seq_len = 1, .seed = 3}),
      qlora_case("qlora: int8 [out, in], 8-bit absmaxes in two groups, 1030 -> 17 (dx in two GPU tiles), "
                 "residual, dx accumulated",
                 {.quant = int8,
                  .out_in = true,
                  .in = 1030,
                  .out = 17,
                  .part_rows = {17},
                  .residual = true,
                  .accumulate = true},
                 b2t5),
  };
}

// LoRA on part of the columns of a frozen fp weight in GPT-2's [in, out] layout, without dropout.
OpCase lora_case() {
  StepConfig step{.batch = 3, .seq_len = 1};
  step.lora = {.rank = 2, .alpha = 5.0f};
  return {"lora on columns 4..12 of a frozen [in, out] weight, T=1", kGpt2, step, [](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const int64_t in = 36, out = 20;
            const LinearParams p{.weight = g.param("attn.c_attn.weight", {in, out}),
                                 .bias = g.param("attn.c_attn.bias", {out}),
                                 .adapters = {g.lora_adapter("attn.c_attn", in, 8, 4)}};
            const int x = g.act("x", in), y = g.act("y", out), dx = g.act("x.grad", in);
            const int dy = g.act("y.grad", out);
            const LoraActs hidden = g.linear("c_attn", "", x, y, -1, p, false);
            g.linear_backward("c_attn.backward", x, p, hidden, dx, dy, false);
          }};
}

// Causal attention (after rotary positions for LLaMA) and its backward, over this rank's heads.
OpCase attention_case(std::string name, const ModelSpec& spec, StepConfig step) {
  return {std::move(name), spec, step, [](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const StepConfig& s = g.step();
            const int64_t C = b.spec.n_embd / s.tp, KV = b.spec.kv_dim() / s.tp, H = b.spec.n_head / s.tp;
            const int64_t scratch = s.device.attention_scratch_floats;
            const bool rope = b.spec.arch == Arch::llama;
            const int positions = g.batch().positions;
            const int qkv = g.act("qkv", C + 2 * KV), out = g.act("att", C);
            const int lse = g.stat("att.lse", {s.batch, H, s.seq_len});
            const int dqkv = g.act("qkv.grad", C + 2 * KV), dout = g.act("att.grad", C);
            if (rope) g.op("rope", ops::Rope{.qkv = qkv, .positions = positions});
            g.attention("att", "", qkv, out, lse, scratch);
            g.attention_backward("att.backward", qkv, out, lse, dqkv, dout, scratch);
            if (rope) g.op("rope.backward", ops::RopeBackward{.dqkv = dqkv, .positions = positions});
          }};
}

OpCase gelu_case(std::string name, int64_t width, bool in_place) {
  return {std::move(name), kOddWidth, {.batch = 2, .seq_len = 5}, [width, in_place](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const int x = g.act("x", width), dy = g.act("gelu.out.grad", width);
            g.activation(Activation::gelu, "gelu", "", x, width);
            g.activation_backward(Activation::gelu, "gelu.backward", x,
                                  in_place ? dy : g.act("x.grad", width), dy);
          }};
}

OpCase swiglu_case() {
  return {"swiglu, I=7", kLlama, {.batch = 2, .seq_len = 5}, [](CaseBuilder& b) {
            GraphBuilder& g = b.g;
            const int64_t I = 7;
            const int x = g.act("gate_up", 2 * I), dx = g.act("gate_up.grad", 2 * I), dy = g.act("h.grad", I);
            g.activation(Activation::swiglu, "swiglu", "", x, I);
            g.activation_backward(Activation::swiglu, "swiglu.backward", x, dx, dy);
          }};
}

// The fused head and loss over this rank's rows of the vocabulary.
OpCase head_case(std::string name, const ModelSpec& spec, StepConfig step, bool training = true) {
  OpCase c{std::move(name), spec, step, [](CaseBuilder& b) {
             GraphBuilder& g = b.g;
             const int x = g.act("x", b.spec.n_embd);
             const int weight = vocab_param(g, "lm_head.weight", b.spec);
             g.lm_head_loss(x, weight, b.spec.n_embd, b.spec.padded_vocab_size / g.step().tp,
                            vocab_begin(g, b.spec));
           }};
  c.training = training;
  return c;
}

OpCase zero_case() {
  return {"zero", kOddWidth, {.batch = 2, .seq_len = 5}, [](CaseBuilder& b) {
            b.g.op("zero", ops::Zero{.out = b.g.act("x.grad", 37)});
          }};
}

std::vector<OpCase> op_cases() {
  const StepConfig b2t5{.batch = 2, .seq_len = 5}, b3t1{.batch = 3, .seq_len = 1};
  const StepConfig packed{.batch = 2, .seq_len = 7, .packed = true};
  const StepConfig sequence_parallel{.batch = 2, .seq_len = 5, .sequence_parallel = true};
  std::vector<OpCase> cases{
      embedding_case("embedding with learned positions, C=37", kOddWidth, b2t5),
      embedding_case("embedding, packed positions", kGpt2, packed),
      embedding_case("embedding, vocabulary shard of tp rank 1, T=1", kLlama, tp_rank1(b3t1)),
      norm_case("layernorm, C=37", NormKind::layernorm, 37, b2t5),
      norm_case("layernorm, T=1", NormKind::layernorm, 24, b3t1),
      norm_case("rmsnorm, C=37", NormKind::rmsnorm, 37, b2t5),
      linear_case("linear [in, out] with bias and residual, 37 -> 20", {37, 20, false, true, true, false},
                  b2t5),
      linear_case("linear [out, in], input gradient accumulated, B=1 T=1", {37, 9, true, false, false, true},
                  {.batch = 1, .seq_len = 1}),
      linear_case("linear, residual shard of sequence-parallel rank 1", {20, 37, true, true, true, false},
                  tp_rank1(sequence_parallel)),
      lora_case(),
      attention_case("rope + attention, 4 heads on 2 (GQA)", kLlama, b2t5),
      attention_case("rope + attention, packed positions", kLlama, packed),
      attention_case("attention, 3 heads, T=1", kGpt2, b3t1),
      attention_case("rope + attention, 4 heads on 1, T=67: a 16-bit block of 64 queries and 3 more",
                     model(Arch::llama, 24, 4, 1), {.batch = 1, .seq_len = 67}),
      attention_case("rope + attention, heads of tp rank 1", kLlama, tp_rank1(b2t5)),
      gelu_case("gelu, backward in place", 37, true),
      gelu_case("gelu, backward into its own tensor", 21, false),
      swiglu_case(),
      head_case("lm head + loss with a loss mask", kGpt2, {.batch = 2, .seq_len = 5, .loss_mask = true}),
      head_case("lm head + loss, evaluation", kLlama, b2t5, /*training=*/false),
      head_case("lm head + loss, vocabulary shard of tp rank 1", kLlama, tp_rank1(b2t5)),
      head_case("lm head + loss over 300 rows: two chunks", kLlama, {.batch = 1, .seq_len = 300}),
      zero_case(),
  };
  for (OpCase& c : qlora_cases()) cases.push_back(std::move(c));
  return cases;
}

void expect_no_problems(const CaseRun& run, const std::string& backend) {
  for (const std::string& p : run.problems) ADD_FAILURE() << backend << ": " << p;
}

class AgainstTheCpu : public ::testing::TestWithParam<BackendUnderTest> {};

TEST_P(AgainstTheCpu, EveryCaseMatchesItsGenericLevel) {
  if (!GetParam().unavailable.empty()) GTEST_SKIP() << GetParam().name << ": " << GetParam().unavailable;
  const BackendUnderTest reference = cpu_backend_at(CpuIsa::generic);
  for (const OpCase& c : op_cases()) {
    if (!GetParam().runs(c)) {
      std::printf("%s: not run on %s (refused for it by the flags' checks)\n", c.name.c_str(),
                  GetParam().name.c_str());
      continue;
    }
    for (const Layout& layout : cpu_layouts()) {
      SCOPED_TRACE(c.name + " | " + layout.name());
      const CaseRun want = run_case(c, layout, reference);
      const CaseRun got = run_case(c, layout, GetParam());
      expect_no_problems(want, reference.name);
      expect_no_problems(got, GetParam().name);
      for (const std::string& m : compare(got, want, layout)) ADD_FAILURE() << m;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BackendOps, AgainstTheCpu, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param.name; });

// In OpKind's order; the assertion below fails to compile when a kind is added without its name here.
// clang-format off
constexpr std::array<std::string_view, 24> kKindNames = {
    "embedding", "layernorm", "rmsnorm", "linear", "rope", "attention", "gelu", "swiglu", "lm_head_loss",
    "layernorm_backward", "rmsnorm_backward", "linear_backward", "rope_backward", "attention_backward",
    "gelu_backward", "swiglu_backward", "embedding_backward", "zero", "lora", "lora_backward",
    "all_reduce", "all_gather", "reduce_scatter", "pipe_exchange"};
// clang-format on
static_assert(kKindNames.size() == std::variant_size_v<OpArgs>, "name the new op kind, and give it a case");

TEST(BackendOpsCoverage, EveryOpKindHasACase) {
  std::vector<OpCase> cases = op_cases();
  for (OpCase& c : collective_cases()) cases.push_back(std::move(c));
  const BackendUnderTest cpu = cpu_backend_at(process_cpu_isa());
  std::set<OpKind> covered;
  for (const OpCase& c : cases) {
    const Layout fp32{};
    for (const Op& op :
         build_case(c, fp32, cpu.traits(fp32.weights, c.step.seq_len, c.spec.head_dim())).graph.ops)
      covered.insert(op.kind());
  }
  for (size_t k = 0; k < kKindNames.size(); ++k)
    EXPECT_TRUE(covered.contains(static_cast<OpKind>(k)))
        << "no backend-ops case runs op kind " << kKindNames[k] << ": add one to op_cases()";
}

}  // namespace
}  // namespace mt::backend_ops
