// Runs a memtrain model (GPT-2 or LLaMA, from CONFIG) on given weights and batches and writes what the
// PyTorch reference compares: the first batch's logits, loss and every trainable parameter's gradient, then
// the losses of `steps` AdamW steps.
//   parity_dump CONFIG.json WEIGHTS.safetensors BATCHES.bin B T STEPS OUT.safetensors [PRECISION [OPTIMIZER
//   [MOMENTS] | RANK ALPHA]]
// BATCHES.bin holds STEPS batches of int32 tokens [B*T] followed by targets [B*T]; a target of -100 (torch's
// ignore_index) runs the model with a loss mask that leaves it out; a file BATCHES.bin.positions beside it
// (STEPS batches of int32 positions [B*T], each token's in its record) runs packed sequences. PRECISION is
// fp32 (default), bf16 or fp16 (16-bit weights and activations with fp32 master weights and gradients; fp16
// without scaling). RANK and ALPHA put LoRA adapters on every linear module over the frozen WEIGHTS: their
// initial values (init.NAME), values after the steps (final.NAME) and the first batch's gradients there
// (final_grad.NAME) are written too, the frozen base weights after the steps under base.NAME (fp32 runs), and
// the trained adapters in PEFT's layout into OUT.safetensors.adapter/. OPTIMIZER adam-mini steps with
// Adam-mini and writes the trained weights (final.NAME, fp32 runs), the v bytes, and where each tensor starts
// in the flat parameters (flat_offset.NAME, of num_params); MOMENTS (fp32, bf16, fp8 or int8) is how the
// moments are stored, and 8-bit ones' m is written as stored (adam_m, its bytes as floats; adam_m_scales).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "io/safetensors.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "memory/precision.h"
#include "model/adam_mini_blocks.h"
#include "model/hf_tensors.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/peft_adapter.h"
#include "model/weights.h"
#include "optim/adamw.h"
#include "optim/optimizer_kind.h"
#include "optim/schedule.h"
#include "tests/device_test_util.h"
#include "tests/dump_tool.h"

namespace {

using namespace mt;

struct Output {
  std::vector<SafetensorsWriter::Item> items;
  std::vector<std::vector<float>> data;
  void add(const std::string& name, std::vector<int64_t> shape, const float* src, int64_t n) {
    items.push_back({name, DType::f32, std::move(shape)});
    data.emplace_back(src, src + n);
  }
};

// `steps` AdamW steps, batch s - 1 for step s, with clipping, warmup then cosine and decay on matrices only
// (the reference does the same): their losses and gradient norms.
void train_steps(const ModelGraph& model, const Plan& plan, Allocation& memory, Executor& exec, int64_t steps,
                 const std::function<void(int64_t)>& load_batch, std::vector<MiniBlocks> mini_blocks,
                 Output& out) {
  const TensorTable& table = model.graph.table;
  std::vector<ParamGroup> groups;
  for (int id : model.params)
    if (table[id].category == Category::params) groups.push_back({id, weight_decays(table[id])});
  AdamW optimizer({0.9f, 0.95f, 1e-8f, 0.1f, 1.0f}, groups, std::move(mini_blocks));
  const LrSchedule schedule{1e-3f, 1e-4f, 3, steps, DecayStyle::cosine};
  std::vector<float> losses, norms;
  for (int64_t s = 1; s <= steps; ++s) {
    load_batch(s - 1);
    std::memset(memory.grads(), 0, plan.bytes[Category::grads]);
    losses.push_back(static_cast<float>(testing::train_step(exec, model, memory, 1.0f)));
    norms.push_back(static_cast<float>(optimizer.step(memory, schedule.at(s), 1.0f).grad_norm));
  }
  out.add("losses", {steps}, losses.data(), steps);
  out.add("grad_norms", {steps}, norms.data(), steps);
}

int run(int argc, char** argv) {
  if (argc != 8 && argc != 9 && argc != 10 && argc != 11) {
    std::fprintf(
        stderr,
        "usage: parity_dump CONFIG WEIGHTS BATCHES B T STEPS OUT [PRECISION [OPTIMIZER [MOMENTS] | RANK "
        "ALPHA]]\n");
    return 2;
  }
  // An optimizer's name, or LoRA's rank.
  const std::optional<OptimizerKind> optimizer =
      argc >= 10 ? kOptimizerNames.parse(argv[9]) : std::optional<OptimizerKind>{};
  PrecisionConfig precision{.precision = parse_precision(argc >= 9 ? argv[8] : "fp32")};
  if (optimizer && argc == 11) precision.set_moments(kMomentDTypeNames.parse_or_fail("MOMENTS", argv[10]));
  ModelStatePolicy policy = model_state_policy(precision);
  // adam-mini: the steps are Adam-mini's, and the trained weights are written too.
  const bool adam_mini = optimizer == OptimizerKind::adam_mini;
  const int64_t B = std::stoll(argv[4]), T = std::stoll(argv[5]), steps = std::stoll(argv[6]);
  const LoraConfig lora = argc == 11 && !optimizer
                              ? LoraConfig{.rank = std::stoll(argv[9]), .alpha = std::stof(argv[10])}
                              : LoraConfig{};
  const ModelSpec spec = resolve_model(argv[1], 64);
  std::vector<int32_t> batches(static_cast<size_t>(steps * 2 * B * T));
  std::ifstream in(argv[3], std::ios::binary);
  in.read(reinterpret_cast<char*>(batches.data()), static_cast<std::streamsize>(batches.size() * 4));
  if (!in) throw std::runtime_error("short batches file");
  constexpr int32_t kIgnored = -100;
  const bool masked = std::find(batches.begin(), batches.end(), kIgnored) != batches.end();
  std::vector<int32_t> positions;
  if (std::ifstream pin(std::string(argv[3]) + ".positions", std::ios::binary); pin) {
    positions.resize(static_cast<size_t>(steps * B * T));
    pin.read(reinterpret_cast<char*>(positions.data()), static_cast<std::streamsize>(positions.size() * 4));
    if (!pin) throw std::runtime_error("short positions file");
  }
  ModelGraph model = build_model_graph(spec, testing::on_cpu(spec, {.batch = B,
                                                                    .seq_len = T,
                                                                    .dtype = policy.weights,
                                                                    .lora = lora,
                                                                    .loss_mask = masked,
                                                                    .packed = !positions.empty()}));
  std::vector<MiniBlocks> mini_blocks;
  if (adam_mini) {
    mini_blocks = adam_mini_blocks(spec, model.graph.table, model.params);
    policy.v_blocks = adam_mini_block_count(mini_blocks);
  }
  const Plan plan = make_plan(model.graph.table, testing::kAlignment, policy);
  Allocation memory(model.graph.table, plan, testing::cpu_backend(plan.policy));
  init_model_params(spec, model, memory, 1234);  // the adapters' initial values; the file has the base's
  load_weights(argv[2], spec, model, memory);
  const TensorTable& table = model.graph.table;
  Output out;
  const auto add_adapters = [&](const std::string& prefix, auto values) {
    for (int id : model.params)
      if (is_lora_a(table[id].name) || is_lora_b(table[id].name))
        out.add(prefix + table[id].name, table[id].shape, values(id), table[id].numel());
  };
  if (policy.weights == DType::f32) add_adapters("init.", [&](int id) { return memory.f32(id); });

  auto load_batch = [&](int64_t s) {
    std::memcpy(memory.i32(model.batch().tokens), &batches[s * 2 * B * T], B * T * 4);
    const int32_t* targets = &batches[(s * 2 + 1) * B * T];
    for (int64_t i = 0; i < B * T; ++i) {
      memory.i32(model.batch().targets)[i] = targets[i] == kIgnored ? 0 : targets[i];
      if (masked) memory.u8(model.batch().loss_mask)[i] = targets[i] != kIgnored;
    }
    if (!positions.empty())
      std::memcpy(memory.i32(model.batch().positions), &positions[s * B * T], B * T * 4);
  };

  Executor exec(spec, model.graph, memory, testing::cpu_backend(plan.policy));
  load_batch(0);
  std::vector<float> logits(B * T * spec.padded_vocab_size);
  exec.forward_logits(logits.data());
  std::vector<float> real(B * T * spec.vocab_size);  // without the padded columns
  for (int64_t r = 0; r < B * T; ++r)
    std::memcpy(&real[r * spec.vocab_size], &logits[r * spec.padded_vocab_size], spec.vocab_size * 4);
  out.add("logits", {B * T, spec.vocab_size}, real.data(), static_cast<int64_t>(real.size()));

  const float loss = static_cast<float>(testing::train_step(exec, model, memory, 1.0f));
  out.add("loss", {1}, &loss, 1);
  // Gradients under the checkpoint's names and shapes: fused parameters split, vocabulary padding removed.
  const std::vector<FileTensor> base = hf_tensors(spec, model);
  for (const FileTensor& f : base)
    if (table[f.param].category == Category::params)
      out.add("grad." + f.name, f.shape, memory.grad<float>(f.param) + f.offset, f.numel());
  add_adapters("grad.", [&](int id) { return memory.grad<float>(id); });

  train_steps(model, plan, memory, exec, steps, load_batch, std::move(mini_blocks), out);
  if (adam_mini && policy.weights == DType::f32) {
    for (const FileTensor& f : base)
      out.add("final." + f.name, f.shape, memory.f32(f.param) + f.offset, f.numel());
    out.add("v_bytes", {1}, std::vector<float>{static_cast<float>(plan.v_bytes)}.data(), 1);
    // Offsets as floats: exact below 2^24, far above the parity models' sizes.
    for (const FileTensor& f : base)
      out.add("flat_offset." + f.name, {1},
              std::vector<float>{static_cast<float>(plan.param_offset[f.param] + f.offset)}.data(), 1);
    out.add("num_params", {1}, std::vector<float>{static_cast<float>(plan.num_params)}.data(), 1);
    if (policy.blocked_moments())  // m's bytes (as floats: exact) and scales, as checkpoints store them
      memory.optimizer_state().visit(0, plan.num_params, StateAccess::read_all, [&](const StateWindow& w) {
        const uint8_t* codes = static_cast<const uint8_t*>(w.m);
        const std::vector<float> bytes(codes, codes + plan.num_params);
        out.add("adam_m", {plan.num_params}, bytes.data(), plan.num_params);
        out.add("adam_m_scales", {plan.moment_scales}, w.m_scales, plan.moment_scales);
      });
  }
  if (lora.enabled() && policy.weights == DType::f32) {
    add_adapters("final.", [&](int id) { return memory.f32(id); });
    // The first batch's gradients again at the trained adapters, where A's are no longer 0.
    load_batch(0);
    std::memset(memory.grads(), 0, plan.bytes[Category::grads]);
    testing::train_step(exec, model, memory, 1.0f);
    add_adapters("final_grad.", [&](int id) { return memory.grad<float>(id); });
    save_peft_adapter(std::string(argv[7]) + ".adapter", spec, model, memory, lora, argv[2]);
    for (const FileTensor& f : base)
      out.add("base." + f.name, f.shape, memory.f32(f.param) + f.offset, f.numel());
  }

  SafetensorsWriter writer(argv[7], out.items);
  for (const auto& d : out.data) writer.write_next(d.data(), d.size() * 4);
  writer.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mt::test::run_dump_tool("parity_dump", run, argc, argv);
}
