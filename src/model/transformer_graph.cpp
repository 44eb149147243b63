#include "model/transformer_graph.h"

#include <string>
#include <vector>

#include "model/pipeline_schedule.h"

namespace mt {

namespace {

struct LayerParams {
  NormParams norm1;
  LinearParams qkv, out;
  NormParams norm2;
  LinearParams up, down;
};

struct LayerActs {
  int inp, qkv, atty, lse, res2, up, act, out;
  NormActs norm1, norm2;
  LoraActs qkv_lora, out_lora, up_lora, down_lora;
};

// One micro-batch's pass through the layers: what each layer's forward made, which its backward reads.
struct LayersPass {
  std::vector<LayerActs> acts;
  std::vector<int> inputs;  // per layer: its input from the first forward
};

// The layers' parameters and ops. Forward tensors emitted with suffix ".recomputed" (full recompute) are new
// tensors, alive from the recompute to their last backward use; each layer keeps the latest ones.
class TransformerBlocks {
 public:
  // Adds the parameters of layers [first, first + count) (a pipeline stage's; all of them without one), one
  // block each.
  TransformerBlocks(GraphBuilder& b, const ModelSpec& spec, BlockFamily family, int64_t first, int64_t count);

  // The layers' forward from inp, layer after layer; each layer's output is the next one's input, the
  // residual stream never copied. Returns the last output.
  int forward(int inp, LayersPass& pass);
  // The layers' backward from the top; the residual gradient dres flows through in place. Each
  // full-recompute group's forward reruns from the input it kept when the backward enters the group.
  void backward(int dres, LayersPass& pass);
  // The layer's Hugging Face linear modules, relative to it ("self_attn.q_proj"): what --lora-target names.
  std::vector<std::string> linear_modules() const;

 private:
  LayerParams add_layer_params(int64_t l);
  // The adapters --lora-target puts on a projection made of `modules` (empty: the projection itself).
  std::vector<LoraAdapter> add_adapters(const std::string& h, const std::string& projection,
                                        const std::vector<HfLinear>& modules, int64_t in, int64_t out);
  int layer_forward(int64_t l, int inp, const std::string& suffix, LayerActs& a);
  // With `selective`, the norms' and activation's outputs are recomputed right before the op that needs them.
  void layer_backward(int64_t l, int dres, bool selective, LayerActs& a);
  // Layer l of this stage's is the model's layer first_ + l.
  std::string prefix(int64_t l) const { return family_.layer_prefix + std::to_string(first_ + l) + "."; }
  int64_t up_width() const;
  // Tensor parallel: the parameters of a column-parallel product (its output columns split, each of
  // `parts`) and of a row-parallel one (its input rows split; its bias replicated).
  LinearParams column_parallel(const std::string& module, int64_t in, const std::vector<int64_t>& parts,
                               bool bias);
  LinearParams row_parallel(const std::string& module, int64_t in, int64_t out, bool bias);
  // A row-parallel product's forward: the ranks' partial products are summed after it, so only the first
  // rank adds the bias and the residual.
  LinearParams forward_only_once(const LinearParams& p) const;

  GraphBuilder& b_;
  BlockFamily family_;
  int64_t C_, NH_;
  int64_t tp_;  // tensor-parallel ranks: the split widths below are 1/tp_ of the whole
  int64_t attn_scratch_;
  int64_t first_;
  std::vector<LayerParams> params_;
};

TransformerBlocks::TransformerBlocks(GraphBuilder& b, const ModelSpec& spec, BlockFamily family,
                                     int64_t first, int64_t count)
    : b_(b),
      family_(std::move(family)),
      C_(spec.n_embd),
      NH_(spec.n_head),
      tp_(b.step().tp),
      attn_scratch_(b.step().device.attention_scratch_floats),
      first_(first) {
  for (int64_t l = 0; l < count; ++l) params_.push_back(add_layer_params(l));
}

LinearParams TransformerBlocks::column_parallel(const std::string& module, int64_t in,
                                                const std::vector<int64_t>& parts, bool bias) {
  int64_t out = 0;
  for (int64_t part : parts) out += part;
  const bool out_in = family_.weight_out_in;
  const int weight =
      b_.param(module + ".weight",
               b_.shard(out_in ? std::vector{out, in} : std::vector{in, out}, out_in ? 0 : 1, parts));
  return {.weight = weight, .bias = bias ? b_.param(module + ".bias", b_.shard({out}, 0, parts)) : -1};
}

LinearParams TransformerBlocks::row_parallel(const std::string& module, int64_t in, int64_t out, bool bias) {
  const bool out_in = family_.weight_out_in;
  const int weight =
      b_.param(module + ".weight",
               b_.shard(out_in ? std::vector{out, in} : std::vector{in, out}, out_in ? 1 : 0, {in}));
  return {.weight = weight, .bias = bias ? b_.param(module + ".bias", {out}) : -1};
}

LinearParams TransformerBlocks::forward_only_once(const LinearParams& p) const {
  LinearParams once = p;
  if (b_.step().tp_rank != 0) once.bias = -1;
  return once;
}

LayerParams TransformerBlocks::add_layer_params(int64_t l) {
  const BlockFamily& f = family_;
  const std::string h = prefix(l);
  const bool layernorm = f.norm == NormKind::layernorm;
  const auto norm = [&](const std::string& module) {
    const int weight = b_.param(h + module + ".weight", {C_});
    return NormParams{.weight = weight, .bias = layernorm ? b_.param(h + module + ".bias", {C_}) : -1};
  };
  const int64_t kv = (f.qkv_width - C_) / 2, I = f.mlp_width;
  const std::vector<int64_t> up_parts =
      f.activation == Activation::swiglu ? std::vector{I, I} : std::vector{I};
  b_.begin_block();
  LayerParams p;
  p.norm1 = norm(f.norm1);
  p.qkv = column_parallel(h + f.qkv_proj, C_, {C_, kv, kv}, f.biases || f.qkv_bias);
  p.out = row_parallel(h + f.out_proj, C_, C_, f.biases);
  p.norm2 = norm(f.norm2);
  p.up = column_parallel(h + f.up_proj, C_, up_parts, f.biases);
  p.down = row_parallel(h + f.down_proj, I, C_, f.biases);
  // Adapters after the layer's base parameters: the same block, so ZeRO exchanges them with the layer.
  p.qkv.adapters = add_adapters(h, f.qkv_proj, f.qkv_modules, C_, f.qkv_width);
  p.out.adapters = add_adapters(h, f.out_proj, {}, C_, C_);
  p.up.adapters = add_adapters(h, f.up_proj, f.up_modules, C_, up_width());
  p.down.adapters = add_adapters(h, f.down_proj, {}, f.mlp_width, C_);
  return p;
}

std::vector<LoraAdapter> TransformerBlocks::add_adapters(const std::string& h, const std::string& projection,
                                                         const std::vector<HfLinear>& modules, int64_t in,
                                                         int64_t out) {
  std::vector<LoraAdapter> adapters;
  int64_t column = 0;
  for (const HfLinear& m : modules.empty() ? std::vector<HfLinear>{{projection, out}} : modules) {
    if (lora_targets(b_.step().lora, m.name))
      adapters.push_back(b_.lora_adapter(h + m.name, in, m.width, column));
    column += m.width;
  }
  return adapters;
}

std::vector<std::string> TransformerBlocks::linear_modules() const {
  const BlockFamily& f = family_;
  std::vector<std::string> names;
  for (const auto& [projection, modules] :
       {std::pair{f.qkv_proj, f.qkv_modules}, std::pair{f.out_proj, std::vector<HfLinear>{}},
        std::pair{f.up_proj, f.up_modules}, std::pair{f.down_proj, std::vector<HfLinear>{}}}) {
    if (modules.empty()) names.push_back(projection);
    for (const HfLinear& m : modules) names.push_back(m.name);
  }
  return names;
}

int64_t TransformerBlocks::up_width() const {
  return family_.activation == Activation::swiglu ? 2 * family_.mlp_width : family_.mlp_width;
}

int TransformerBlocks::forward(int inp, LayersPass& pass) {
  pass.inputs.assign(params_.size(), -1);
  pass.acts.resize(params_.size());
  for (size_t l = 0; l < params_.size(); ++l) {
    pass.inputs[l] = inp;
    inp = layer_forward(static_cast<int64_t>(l), inp, "", pass.acts[l]);
  }
  return inp;
}

void TransformerBlocks::backward(int dres, LayersPass& pass) {
  const StepConfig& step = b_.step();
  const int64_t n_layer = static_cast<int64_t>(params_.size());
  const std::vector<int64_t> group = full_recompute_groups(step.recompute, n_layer);
  const bool selective = step.recompute.granularity == RecomputeGranularity::selective;
  for (int64_t l = n_layer - 1; l >= 0; --l) {
    // Entering a recompute group from its top: rerun the group's forward from the input it kept.
    if (group[l] >= 0 && (l == n_layer - 1 || group[l + 1] != group[l])) {
      int inp = pass.inputs[group[l]];
      for (int64_t r = group[l]; r <= l; ++r) inp = layer_forward(r, inp, ".recomputed", pass.acts[r]);
    }
    layer_backward(l, dres, selective, pass.acts[l]);
  }
}

int TransformerBlocks::layer_forward(int64_t l, int inp, const std::string& suffix, LayerActs& a) {
  const BlockFamily& f = family_;
  const LayerParams& p = params_[l];
  const std::string h = prefix(l), attn = h + f.attention;
  const int64_t B = b_.step().batch, T = b_.step().seq_len;
  // The ranks' row-parallel partial products are summed: only the first rank adds the residual, or under
  // sequence parallelism each rank its own tokens' (GraphBuilder::linear).
  const bool adds_residual = b_.step().tp_rank == 0 || b_.sequence_parallel();
  a.inp = inp;
  a.qkv = b_.act(attn + ".qkv" + suffix, f.qkv_width / tp_);
  a.atty = b_.act(attn + ".out" + suffix, C_ / tp_);
  a.lse = b_.stat(attn + ".lse" + suffix, {B, NH_ / tp_, T});
  a.res2 = b_.residual_act(attn + ".residual" + suffix, C_);
  a.up = b_.act(h + f.up_out + suffix, up_width() / tp_);
  a.out = b_.residual_act(h + "out" + suffix, C_);
  a.norm1 = b_.norm(f.norm, h + f.norm1, suffix, a.inp, p.norm1, C_);
  const int x1 = b_.gathered(h + f.norm1 + ".out.gathered" + suffix, a.norm1.out);
  a.qkv_lora = b_.linear(h + f.qkv_proj, suffix, x1, a.qkv, -1, p.qkv, f.weight_out_in);
  if (f.rope) b_.op(attn + ".rope" + suffix, ops::Rope{.qkv = a.qkv, .positions = b_.batch().positions});
  b_.attention(attn, suffix, a.qkv, a.atty, a.lse, attn_scratch_);
  const int attn_sum = b_.partial_sum(attn + ".partial" + suffix, a.res2);
  a.out_lora = b_.linear(h + f.out_proj, suffix, a.atty, attn_sum, adds_residual ? a.inp : -1,
                         forward_only_once(p.out), f.weight_out_in);
  b_.sum_partials(h + f.out_proj + suffix, attn_sum, a.res2);
  a.norm2 = b_.norm(f.norm, h + f.norm2, suffix, a.res2, p.norm2, C_);
  const int x2 = b_.gathered(h + f.norm2 + ".out.gathered" + suffix, a.norm2.out);
  a.up_lora = b_.linear(h + f.up_proj, suffix, x2, a.up, -1, p.up, f.weight_out_in);
  a.act = b_.activation(f.activation, h + f.activation_name, suffix, a.up, f.mlp_width / tp_);
  const int mlp_sum = b_.partial_sum(h + "mlp.partial" + suffix, a.out);
  a.down_lora = b_.linear(h + f.down_proj, suffix, a.act, mlp_sum, adds_residual ? a.res2 : -1,
                          forward_only_once(p.down), f.weight_out_in);
  b_.sum_partials(h + f.down_proj + suffix, mlp_sum, a.out);
  return a.out;
}

void TransformerBlocks::layer_backward(int64_t l, int dres, bool selective, LayerActs& a) {
  const BlockFamily& f = family_;
  const LayerParams& p = params_[l];
  const std::string h = prefix(l), attn = h + f.attention, re = ".recomputed";
  const std::string activation = h + f.activation_name;
  // GELU's backward runs in place on the gradient of its input; SwiGLU's has one of each width.
  const bool in_place = f.activation == Activation::gelu;
  const int dact = b_.act(in_place ? h + f.up_out + ".grad" : activation + ".out.grad", f.mlp_width / tp_);
  const int dup = in_place ? dact : b_.act(h + f.up_out + ".grad", up_width() / tp_);
  const int dnorm2 = b_.residual_act(h + f.norm2 + ".out.grad", C_);
  const int datty = b_.act(attn + ".out.grad", C_ / tp_);
  const int dqkv = b_.act(attn + ".qkv.grad", f.qkv_width / tp_);
  const int dnorm1 = b_.residual_act(h + f.norm1 + ".out.grad", C_);
  // Sequence parallel: the row-parallel products' backward reads every token's gradient, the column-parallel
  // ones' their gathered inputs again (not kept from the forward), and their input gradients are partial.
  const int dnorm2_sum = b_.partial_sum(h + f.norm2 + ".out.grad.partial", dnorm2);
  const int dnorm1_sum = b_.partial_sum(h + f.norm1 + ".out.grad.partial", dnorm1);
  if (selective) a.act = b_.activation(f.activation, activation, re, a.up, f.mlp_width / tp_);
  const int dout = b_.gathered(h + "out.grad.gathered", dres);
  b_.linear_backward(h + f.down_proj + ".backward", a.act, p.down, a.down_lora, dact, dout, f.weight_out_in);
  b_.activation_backward(f.activation, activation + ".backward", a.up, dup, dact);
  if (selective) a.norm2 = b_.norm(f.norm, h + f.norm2, re, a.res2, p.norm2, C_);
  const int x2 = b_.gathered(h + f.norm2 + ".out.regathered", a.norm2.out);
  b_.linear_backward(h + f.up_proj + ".backward", x2, p.up, a.up_lora, dnorm2_sum, dup, f.weight_out_in);
  b_.sum_partials(h + f.up_proj + ".backward", dnorm2_sum, dnorm2);
  b_.norm_backward(f.norm, h + f.norm2 + ".backward", a.res2, p.norm2, a.norm2, dres, dnorm2);
  const int dres2 = b_.gathered(attn + ".residual.grad.gathered", dres);
  b_.linear_backward(h + f.out_proj + ".backward", a.atty, p.out, a.out_lora, datty, dres2, f.weight_out_in);
  b_.attention_backward(attn + ".backward", a.qkv, a.atty, a.lse, dqkv, datty, attn_scratch_);
  if (f.rope)
    b_.op(attn + ".rope.backward", ops::RopeBackward{.dqkv = dqkv, .positions = b_.batch().positions});
  if (selective) a.norm1 = b_.norm(f.norm, h + f.norm1, re, a.inp, p.norm1, C_);
  const int x1 = b_.gathered(h + f.norm1 + ".out.regathered", a.norm1.out);
  b_.linear_backward(h + f.qkv_proj + ".backward", x1, p.qkv, a.qkv_lora, dnorm1_sum, dqkv, f.weight_out_in);
  b_.sum_partials(h + f.qkv_proj + ".backward", dnorm1_sum, dnorm1);
  b_.norm_backward(f.norm, h + f.norm1 + ".backward", a.inp, p.norm1, a.norm1, dres, dnorm1);
}

// The step around a stage's layers: the embedding on the first stage, the final norm, head and loss on the
// last (one stage holds all of them without pipeline parallelism), each micro-batch's forward and backward in
// the stage's 1F1B order, and the exchanges with the stages beside it. One residual-stream gradient per
// micro-batch accumulates through every layer, in place.
class StageStep {
 public:
  StageStep(GraphBuilder& b, const ModelSpec& spec, const ModelFamily& family);
  void forward(int64_t micro_batch);
  void backward(int64_t micro_batch);
  void finish();

 private:
  struct Pass {
    LayersPass layers;
    int residual = -1;  // the last layer's output
    NormActs normed;    // the final norm's (last stage)
    int dhead_in = -1;  // the head's input gradient (last stage)
  };
  bool first() const { return b_.step().pp_rank == 0; }
  bool last() const { return b_.step().pp_rank == b_.step().pp - 1; }
  // The embeddings' parameter of a trained one, else -1 (LoRA's frozen embeddings get no gradient).
  int trained(int id) const {
    return id >= 0 && b_.model().graph.table[id].category == Category::params ? id : -1;
  }

  GraphBuilder& b_;
  const ModelSpec& spec_;
  const ModelFamily& family_;
  int64_t C_, vocab_begin_;
  int wte_ = -1, wpe_ = -1, head_ = -1;
  NormParams final_norm_;
  TransformerBlocks blocks_;
  std::vector<Pass> passes_;
};

StageStep::StageStep(GraphBuilder& b, const ModelSpec& spec, const ModelFamily& family)
    : b_(b),
      spec_(spec),
      family_(family),
      C_(spec.n_embd),
      // Tensor parallel: the embedding and head hold this rank's rows of the vocabulary.
      vocab_begin_(b.step().tp_rank * (spec.padded_vocab_size / b.step().tp)),
      wte_(first()
               ? b.param(family.embedding, b.shard({spec.padded_vocab_size, C_}, 0, {spec.padded_vocab_size}))
               : -1),
      wpe_(first() && !family.positions.empty() ? b.param(family.positions, {spec.n_positions, C_}) : -1),
      blocks_(b, spec, family.block, b.step().pp_rank * (spec.n_layer / b.step().pp),
              spec.n_layer / b.step().pp),
      passes_(static_cast<size_t>(b.step().pp > 1 ? b.step().micro_batches : 1)) {
  const bool tied = spec.tied_head || family.head.empty();
  if (tied && first() && !last()) b.mark_tied_embedding(wte_);
  if (!last()) return;
  const int64_t Vp = spec.padded_vocab_size;
  b.begin_block();  // the final norm and the head: one block, as their ops run back to back
  const std::string& fn = family.final_norm;
  final_norm_.weight = b.param(fn + ".weight", {C_});
  if (family.block.norm == NormKind::layernorm) final_norm_.bias = b.param(fn + ".bias", {C_});
  // A tied head on a later stage than the embedding is a copy of it (ModelGraph::tied_embedding).
  if (tied && !first()) {
    wte_ = b.param(family.embedding, b.shard({Vp, C_}, 0, {Vp}));
    b.mark_tied_embedding(wte_);
  }
  head_ = tied ? wte_ : b.param(family.head, b.shard({Vp, C_}, 0, {Vp}));
}

void StageStep::forward(int64_t micro_batch) {
  b_.begin_pass({.forward = true, .micro_batch = micro_batch});
  Pass& pass = passes_[static_cast<size_t>(micro_batch)];
  const NormKind norm = family_.block.norm;
  int embedded = -1;
  if (first()) {
    embedded = b_.residual_act(family_.embed_out, C_);
    const int embed_sum = b_.partial_sum(family_.embed_out + ".partial", embedded);
    // The ranks' embeddings are summed: only the first adds the positions'.
    b_.op("embed", ops::Embedding{.out = embed_sum,
                                  .wte = wte_,
                                  .wpe = b_.step().tp_rank == 0 ? wpe_ : -1,
                                  .tokens = b_.batch().tokens,
                                  .positions = b_.batch().positions,
                                  .vocab_begin = vocab_begin_});
    b_.sum_partials("embed", embed_sum, embedded);
  } else {
    embedded = b_.receive("stage.input", C_, /*next=*/false);
  }
  pass.residual = blocks_.forward(embedded, pass.layers);
  if (last()) {
    const std::string& fn = family_.final_norm;
    pass.normed = b_.norm(norm, fn, "", pass.residual, final_norm_, C_);
    const int head_in = b_.gathered(fn + ".out.gathered", pass.normed.out);
    pass.dhead_in = b_.lm_head_loss(head_in, head_, C_, b_.model().graph.table[head_].shape[0], vocab_begin_);
  } else {
    b_.send("stage.output", pass.residual, /*next=*/true);
  }
  b_.end_first_forward();
}

void StageStep::backward(int64_t micro_batch) {
  b_.begin_pass({.forward = false, .micro_batch = micro_batch});
  Pass& pass = passes_[static_cast<size_t>(micro_batch)];
  int dres = -1;
  if (last()) {
    const std::string& fn = family_.final_norm;
    const int dnormed = b_.sequence_parallel() ? b_.residual_act(fn + ".out.grad", C_) : pass.dhead_in;
    b_.sum_partials("lm_head.backward", pass.dhead_in, dnormed);
    dres = b_.residual_act("residual.grad", C_);
    b_.op("residual.grad.zero", ops::Zero{.out = dres});
    b_.norm_backward(family_.block.norm, fn + ".backward", pass.residual, final_norm_, pass.normed, dres,
                     dnormed);
  } else {
    dres = b_.receive("residual.grad", C_, /*next=*/true);
  }
  blocks_.backward(dres, pass.layers);
  if (!first()) {
    b_.send("stage.input.grad", dres, /*next=*/false);
  } else if (trained(wte_) >= 0 || trained(wpe_) >= 0) {  // no op when neither embedding trains
    b_.op("embed.backward", ops::EmbeddingBackward{.wte = trained(wte_),
                                                   .wpe = trained(wpe_),
                                                   .dout = b_.gathered("residual.grad.gathered", dres),
                                                   .tokens = b_.batch().tokens,
                                                   .positions = b_.batch().positions,
                                                   .vocab_begin = vocab_begin_});
  }
}

void StageStep::finish() {
  std::vector<std::string> param_names;
  for (int id : b_.model().params) param_names.push_back(b_.model().graph.table[id].name);
  check_lora_names(b_.step().lora, blocks_.linear_modules(), param_names);
  b_.finish();
}

void emit_step(GraphBuilder& b, const ModelSpec& spec, const ModelFamily& family) {
  StageStep step(b, spec, family);
  const StepConfig& c = b.step();
  for (const PipelinePass& pass : one_f_one_b(c.pp, c.pp_rank, c.pp > 1 ? c.micro_batches : 1)) {
    if (pass.forward)
      step.forward(pass.micro_batch);
    else
      step.backward(pass.micro_batch);
  }
  step.finish();
}

}  // namespace

ModelGraph build_transformer_graph(const ModelSpec& spec, const StepConfig& step, const ModelFamily& family) {
  ModelGraph m;
  GraphBuilder b(m, step);
  emit_step(b, spec, family);
  return m;
}

}  // namespace mt
