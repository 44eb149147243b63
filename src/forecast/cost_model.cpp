#include "forecast/cost_model.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "forecast/shipped_profiles.h"
#include "model/pipeline_schedule.h"

namespace mt {

namespace {

double operand_bytes(const TensorTable& table, const Op& op) {
  double bytes = 0;
  for (int id : op.operands())
    if (id >= 0) bytes += static_cast<double>(table[id].bytes());
  return bytes;
}

// A matrix product's operands, forward or backward (dinp: -1 in the forward).
struct LinearOperands {
  int inp, weight, dinp;
  bool weight_out_in;
};

LinearOperands linear_operands(const Op& op) {
  if (op.kind() == OpKind::linear) {
    const auto& a = op.as<ops::Linear>();
    return {a.inp, a.weight, -1, a.weight_out_in};
  }
  const auto& a = op.as<ops::LinearBackward>();
  return {a.inp, a.weight, a.dinp, a.weight_out_in};
}

// The tensor an elementwise op's time scales with: the forward's output, the backward's incoming gradient,
// RoPE's rotated one.
int elementwise_extent(const Op& op) {
  switch (op.kind()) {
    case OpKind::layernorm:
      return op.as<ops::LayerNorm>().out;
    case OpKind::rmsnorm:
      return op.as<ops::RmsNorm>().out;
    case OpKind::gelu:
      return op.as<ops::Gelu>().out;
    case OpKind::swiglu:
      return op.as<ops::Swiglu>().out;
    case OpKind::rope:
      return op.as<ops::Rope>().qkv;
    case OpKind::layernorm_backward:
      return op.as<ops::LayerNormBackward>().dout;
    case OpKind::rmsnorm_backward:
      return op.as<ops::RmsNormBackward>().dout;
    case OpKind::gelu_backward:
      return op.as<ops::GeluBackward>().dout;
    case OpKind::swiglu_backward:
      return op.as<ops::SwigluBackward>().dout;
    case OpKind::rope_backward:
      return op.as<ops::RopeBackward>().dqkv;
    default:
      throw std::logic_error("cost model: " + op.name + " is not elementwise");
  }
}

// The share of an exchanged buffer one rank sends and receives among `ranks` in a reduce-scatter or an
// all-gather; an all-reduce moves twice that, as the MPI communicator's does (each rank sums its chunk from
// every peer, then gathers the others' sums), and as calibrate's bus bandwidth counts.
double ring_share(int ranks) {
  return static_cast<double>(ranks - 1) / ranks;
}

// A profile calibrated outside mpirun has no MPI rates: the shipped ones of its level and threads stand in.
const HardwareProfile& mpi_rates(const HardwareProfile& profile) {
  return profile.mpi_gbps ? profile : shipped_hardware_profile(profile.cpu_isa, profile.threads);
}

double mpi_seconds(const HardwareProfile& profile, double bytes) {
  return bytes / (*mpi_rates(profile).mpi_gbps * 1e9);
}

// Bytes one rank sends and receives per step for the ZeRO stage's exchanges.
double comm_bytes(const Plan& plan, int stage, int world, int64_t accum) {
  if (world < 2) return 0;
  const double ring = ring_share(world);
  const double n = static_cast<double>(plan.num_params);
  const double grads = n * static_cast<double>(dtype_size(plan.policy.grads));
  const double weights = n * static_cast<double>(dtype_size(plan.policy.weights));
  const double sums = static_cast<double>(plan.v_sums_bytes);
  switch (stage) {
    case 0:
      return 2 * grads * ring;  // all-reduce once per step
    case 1:  // reduce to owners (all-reduce for Adam-mini's whole v), gather the updated weights
      return ((plan.reduces_grads_to_owners() ? 1 : 2) * grads + weights) * ring;
    case 2:  // every micro-batch's windows reduced to owners (and Adam-mini's block sums all-reduced)
      return (accum * grads + weights + 2 * sums) * ring;
    default:  // and each window's weights gathered twice a pass
      return (accum * grads + 2 * accum * weights + 2 * sums) * ring;
  }
}

// Bytes one rank sends and receives per step for the update in the backward, whose graph runs `passes`
// times (twice with a norm pass): each block reduced to its owners as it completes (all-reduced, twice the
// bytes, without sharding or under Adam-mini), then ZeRO-1 and 2 gather the updated weights once, ZeRO-3
// each window's weights twice a pass.
double in_backward_comm_bytes(const Plan& plan, int world, int passes) {
  if (world < 2) return 0;
  const double n = static_cast<double>(plan.num_params);
  const double grads = n * static_cast<double>(dtype_size(plan.policy.grads));
  const double weights = n * static_cast<double>(dtype_size(plan.policy.weights));
  const int stage = plan.sharding.stage;
  const double reductions = plan.reduces_grads_to_owners() ? 1 : 2;
  const double gathers = stage >= 3 ? 2.0 * passes : stage >= 1 ? 1 : 0;
  return (reductions * grads * passes + gathers * weights) * ring_share(world);
}

// AdamW's calibrated rate for this run's moments; a profile calibrated before the 8-bit kernels existed has
// none for them, and the shipped profile of its level and threads stands in (as for MPI above).
double adamw_mparams(const HardwareProfile& profile, DType moments) {
  const std::optional<double> rate = profile.adamw_mparams.of(moments);
  return rate ? *rate : *shipped_hardware_profile(profile.cpu_isa, profile.threads).adamw_mparams.of(moments);
}

// The fused LM head and loss: logits, then in training the input's and the weight's gradient, at the head's
// calibrated rate. Under tensor parallelism the weight is this rank's rows of the vocabulary, and every chunk
// of rows all-gathers the ranks' row statistics, 3 floats a row from each (no latency in the profile: priced
// by bytes at the MPI bandwidth).
OpCost lm_head_cost(const TensorTable& table, const ops::LmHeadLoss& a, const HardwareProfile& profile,
                    int tp) {
  OpCost c;
  c.kind = OpCostKind::matmul;
  const TensorDesc& weight = table[a.weight];  // [Vp / tp, C]
  const int64_t M = table[a.inp].numel() / weight.shape[1];
  const double products = a.dinp >= 0 ? 3 : 1;
  c.flops = products * 2.0 * static_cast<double>(M) * static_cast<double>(weight.shape[0]) *
            static_cast<double>(weight.shape[1]);
  if (a.row_stats >= 0) {
    const double gathered = static_cast<double>(tp) * 3 * static_cast<double>(M) * sizeof(float);
    c.comm_s = mpi_seconds(profile, ring_share(tp) * gathered);
  }
  c.seconds = c.flops / (profile.lm_head(weight.dtype != DType::f32) * 1e9) + c.comm_s;
  return c;
}

// Causal attention over `products` T x T products per head (forward: Q K^T and P V; backward: the scores
// again, then dP, dV, dQ and dK), half of each, at the attention kernels' calibrated rate. The heads are this
// rank's: the log-sum-exp's [B, heads, T].
OpCost attention_cost(const TensorTable& table, int qkv, int lse, double products,
                      const HardwareProfile& profile, const ModelSpec& spec) {
  OpCost c;
  c.kind = OpCostKind::attention;
  const TensorDesc& q = table[qkv];
  const int64_t B = q.shape[0], T = q.shape[1], heads = table[lse].shape[1];
  c.flops = products * 2.0 * static_cast<double>(B * heads) * static_cast<double>(T) *
            static_cast<double>(T) * static_cast<double>(spec.head_dim()) / 2;
  c.seconds = c.flops / (profile.attention(q.dtype != DType::f32) * 1e9);
  return c;
}

// A pipeline stage of P over m micro-batches idles (P - 1) / m of its passes' time (kernels and exchanges)
// while the pipeline fills and drains; a stage holding a tied embedding also sums its gradient with the
// other end's, one all-reduce between two ranks, after its passes.
void add_pipeline_costs(const RunShape& run, const Plan& plan, const HardwareProfile& profile,
                        double compute_s, StepCost& c) {
  if (run.pp == 1) return;
  c.bubble_fraction = pipeline_bubble_fraction(run.pp, run.accum);
  c.bubble_s = (compute_s + c.tp_comm_s + c.pp_comm_s) * (run.pp - 1) / static_cast<double>(run.accum);
  if (run.tied_embedding_numel > 0) {
    const double grads =
        static_cast<double>(run.tied_embedding_numel) * static_cast<double>(dtype_size(plan.policy.grads));
    c.pp_comm_s += mpi_seconds(profile, 2 * ring_share(2) * grads);
  }
}

}  // namespace

OpCost predict_op_cost(const TensorTable& table, const Op& op, const ModelSpec& spec,
                       const HardwareProfile& profile, int tp) {
  OpCost c;
  switch (op.kind()) {
    case OpKind::linear:
    case OpKind::linear_backward: {
      c.kind = OpCostKind::matmul;
      const LinearOperands a = linear_operands(op);
      const TensorDesc& weight = table[a.weight];
      const int64_t n_in = a.weight_out_in ? weight.shape[1] : weight.shape[0];
      const int64_t n_out = a.weight_out_in ? weight.shape[0] : weight.shape[1];
      const int64_t M = table[a.inp].numel() / n_in;
      // The backward takes the weight's gradient and, unless it is the first layer's, the input's.
      const bool forward = op.kind() == OpKind::linear;
      const double products = forward ? 1 : (a.dinp >= 0 ? 2 : 1);
      c.flops =
          products * 2.0 * static_cast<double>(M) * static_cast<double>(n_in) * static_cast<double>(n_out);
      const LinearRates& rates = profile.linear(weight.dtype);
      c.seconds =
          c.flops / ((forward ? rates.forward : rates.backward).at(weight_class(n_in, n_out), M) * 1e9);
      break;
    }
    case OpKind::lm_head_loss:
      c = lm_head_cost(table, op.as<ops::LmHeadLoss>(), profile, tp);
      break;
    case OpKind::attention: {
      const auto& a = op.as<ops::Attention>();
      c = attention_cost(table, a.qkv, a.lse, 2, profile, spec);
      break;
    }
    case OpKind::attention_backward: {
      const auto& a = op.as<ops::AttentionBackward>();
      c = attention_cost(table, a.qkv, a.lse, 5, profile, spec);
      break;
    }
    case OpKind::all_reduce:
      // Tensor parallel: the whole op is the exchange.
      c.comm_s = c.seconds = mpi_seconds(
          profile, 2 * ring_share(tp) * static_cast<double>(table[op.as<ops::AllReduce>().data].bytes()));
      break;
    case OpKind::all_gather:
      // Sequence parallel: each rank receives the others' shards of the whole tensor...
      c.comm_s = c.seconds = mpi_seconds(
          profile, ring_share(tp) * static_cast<double>(table[op.as<ops::AllGather>().out].bytes()));
      break;
    case OpKind::reduce_scatter:
      // ... and sends the others their shards of its whole partial sum.
      c.comm_s = c.seconds = mpi_seconds(
          profile, ring_share(tp) * static_cast<double>(table[op.as<ops::ReduceScatter>().inp].bytes()));
      break;
    case OpKind::pipe_exchange: {
      // Pipeline parallel: every byte sent or received crosses once.
      const auto& a = op.as<ops::PipeExchange>();
      double bytes = 0;
      for (int id : {a.send, a.recv})
        if (id >= 0) bytes += static_cast<double>(table[id].bytes());
      c.comm_s = c.seconds = mpi_seconds(profile, bytes);
      break;
    }
    case OpKind::embedding:
    case OpKind::embedding_backward: {
      // Only the batch's rows of the table are touched: as many as the activation's.
      const int act =
          op.kind() == OpKind::embedding ? op.as<ops::Embedding>().out : op.as<ops::EmbeddingBackward>().dout;
      c.seconds = 2.0 * static_cast<double>(table[act].bytes()) / (profile.memory_gbps * 1e9);
      break;
    }
    case OpKind::layernorm:
    case OpKind::rmsnorm:
    case OpKind::layernorm_backward:
    case OpKind::rmsnorm_backward:
    case OpKind::gelu:
    case OpKind::swiglu:
    case OpKind::rope:
    case OpKind::gelu_backward:
    case OpKind::swiglu_backward:
    case OpKind::rope_backward: {
      // The forward's output elements (the backward's incoming gradient's, or RoPE's in-place one) at the
      // kernel family's rate.
      const bool norm = op.kind() == OpKind::layernorm || op.kind() == OpKind::rmsnorm ||
                        op.kind() == OpKind::layernorm_backward || op.kind() == OpKind::rmsnorm_backward;
      const double elements = static_cast<double>(table[elementwise_extent(op)].numel());
      c.seconds = elements / ((norm ? profile.norm_melems : profile.activation_melems) * 1e6);
      break;
    }
    default:
      c.seconds = operand_bytes(table, op) / (profile.memory_gbps * 1e9);
  }
  return c;
}

RunShape run_shape(const RunLayout& run) {
  const int tied = run.model.tied_embedding;
  return {.accum = run.accum,
          .seq_len = run.seq_len,
          .graph_passes = static_cast<int64_t>(run.model.batches.size()),
          .pp = run.model.graph.pp,
          .tied_embedding_numel = tied >= 0 ? run.model.graph.table[tied].numel() : 0};
}

StepCost sum_op_costs(const Graph& graph, const ModelSpec& spec, const HardwareProfile& profile, int tp) {
  StepCost c;
  for (const Op& op : graph.ops) {
    const OpCost op_cost = predict_op_cost(graph.table, op, spec, profile, tp);
    c.flops += op_cost.flops;
    double& seconds = op_cost.kind == OpCostKind::matmul      ? c.matmul_s
                      : op_cost.kind == OpCostKind::attention ? c.attention_s
                                                              : c.elementwise_s;
    seconds += op_cost.seconds - op_cost.comm_s;
    (op.kind() == OpKind::pipe_exchange ? c.pp_comm_s : c.tp_comm_s) += op_cost.comm_s;
  }
  return c;
}

StepCost step_cost(const StepCost& ops, const RunShape& run, const Plan& plan, const TrainConfig& config,
                   int data_parallel, const HardwareProfile& profile) {
  // The graph runs once per micro-batch, or once per step on a pipeline stage (which holds them all); the
  // update in the backward runs it twice where clipping or fp16 needs the norm first (Trainer).
  const bool norm_pass = config.optimizer_in_backward &&
                         (config.adam.clip_grad > 0 || config.precision.precision == Precision::fp16);
  const double passes =
      static_cast<double>(run.accum) / static_cast<double>(run.graph_passes) * (norm_pass ? 2 : 1);
  StepCost c;
  c.flops = ops.flops * passes;
  c.matmul_s = ops.matmul_s * passes;
  c.attention_s = ops.attention_s * passes;
  c.elementwise_s = ops.elementwise_s * passes;
  c.tp_comm_s = ops.tp_comm_s * passes;
  c.pp_comm_s = ops.pp_comm_s * passes;
  // Per step besides the ops: the gradients zeroed, their norm summed for clipping, and AdamW over this
  // rank's shard at the calibrated rate of its moments' dtype.
  const double shard_params = static_cast<double>(plan.shard_elems);
  const double grads = static_cast<double>(plan.bytes[Category::grads]);
  c.optimizer_s = 2 * grads / (profile.memory_gbps * 1e9) +
                  shard_params / (adamw_mparams(profile, plan.policy.moments) * 1e6);
  // Adam-mini reads every gradient once more, for its blocks' second moments, before AdamW's pass.
  if (config.optimizer == OptimizerKind::adam_mini)
    c.optimizer_s +=
        shard_params * static_cast<double>(dtype_size(plan.policy.grads)) / (profile.memory_gbps * 1e9);
  if (plan.offload.enabled)
    c.offload_s = 2 * static_cast<double>(plan.offloaded_bytes) / (profile.disk_gbps * 1e9);
  // The update in the backward waits for each block's reduction.
  c.comm_s = mpi_seconds(profile, config.optimizer_in_backward
                                      ? in_backward_comm_bytes(plan, data_parallel, norm_pass ? 2 : 1)
                                      : comm_bytes(plan, plan.sharding.stage, data_parallel, run.accum));
  // Overlapped exchanges: the calibrated share hides, at most behind the backward's half of the compute; a
  // negative share (exchanges and kernels sharing the cores) costs more than waiting for them. A pipeline
  // stage starts them after its last pass: nothing hides them.
  const double compute_s = c.matmul_s + c.attention_s + c.elementwise_s;
  c.comm_exposed_s =
      config.overlap_comm && run.pp == 1 && !config.optimizer_in_backward
          ? std::max(c.comm_s * (1 - *mpi_rates(profile).comm_overlap), c.comm_s - compute_s / 2)
          : c.comm_s;
  add_pipeline_costs(run, plan, profile, compute_s, c);
  c.step_s =
      compute_s + c.bubble_s + c.optimizer_s + c.comm_exposed_s + c.tp_comm_s + c.pp_comm_s + c.offload_s;
  // In doubles: the global batch's tokens may pass 2^63, which int64_t would wrap negative ("-0 tokens/s").
  const double tokens = static_cast<double>(run.accum) * static_cast<double>(config.micro_batch) *
                        static_cast<double>(run.seq_len) * static_cast<double>(data_parallel);
  c.tokens_per_sec = tokens / c.step_s;
  return c;
}

StepCost predict_step_cost(const RunLayout& run, const TrainConfig& config, int data_parallel,
                           const HardwareProfile& profile) {
  return step_cost(sum_op_costs(run.model.graph, run.spec, profile, config.tensor_parallel), run_shape(run),
                   run.plan, config, data_parallel, profile);
}

}  // namespace mt
