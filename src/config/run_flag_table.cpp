#include "config/run_flag_table.h"

#include <stdexcept>

namespace mt {

namespace {

template <auto Member>
FlagField config_field(RunFlagInput& in) {
  return &(in.config.*Member);
}
template <auto Group, auto Member>
FlagField group_field(RunFlagInput& in) {
  return &((in.config.*Group).*Member);
}
template <auto Member>
FlagField input_field(RunFlagInput& in) {
  return &(in.*Member);
}

// Megatron's spelling: --bf16, --fp16; fp32 is the default.
std::string print_precision(const TrainConfig& c) {
  const Precision p = c.precision.precision;
  return p == Precision::fp32 ? "" : "--" + precision_name(p);
}
nlohmann::json precision_setting(const TrainConfig& c) {
  return precision_name(c.precision.precision);
}

// Recorded resolved: a resume continues the schedule the checkpoint recorded.
nlohmann::json lr_decay_iters_setting(const TrainConfig& c) {
  return c.decay_iters();
}

// Both moments' dtypes go together (they must be equal); the MindSpeed alias --o2-optimizer prints nothing.
std::string print_moments(const TrainConfig& c) {
  const PrecisionConfig& p = c.precision;
  if (p.exp_avg == MomentDType::fp32 && p.exp_avg_sq == MomentDType::fp32) return "";
  return "--exp-avg-dtype " + moment_dtype_name(p.exp_avg) + " --exp-avg-sq-dtype " +
         moment_dtype_name(p.exp_avg_sq);
}
std::string printed_by_moments(const TrainConfig&) {
  return "";
}
// A checkpoint's record under the alias's name as well: it was the only name of bf16 moments once.
nlohmann::json o2_optimizer_setting(const TrainConfig& c) {
  return c.precision.moments() == MomentDType::bf16;
}
std::string print_main_grads(const TrainConfig& c) {
  return c.precision.o2_gradient ? "--main-grads-dtype bf16" : "";
}
nlohmann::json main_grads_setting(const TrainConfig& c) {
  return kMainGradsDTypeNames.name(c.precision.o2_gradient);
}
std::string print_main_params(const TrainConfig& c) {
  return c.precision.master_weights ? "" : "--main-params-dtype none";
}
nlohmann::json main_params_setting(const TrainConfig& c) {
  return kMainParamsDTypeNames.name(c.precision.master_weights);
}
std::string printed_by_main_dtypes(const TrainConfig&) {
  return "";
}

// The whole group: method and layer count are spelt out even at their defaults.
std::string print_recompute(const TrainConfig& c) {
  const RecomputeConfig& r = c.recompute;
  if (r.granularity == RecomputeGranularity::none) return "";
  std::string s = "--recompute-granularity " + std::string(kRecomputeGranularityNames.name(r.granularity));
  if (r.granularity == RecomputeGranularity::full)
    s += " --recompute-method " + std::string(kRecomputeMethodNames.name(r.method)) +
         " --recompute-num-layers " + std::to_string(r.num_layers);
  return s;
}

// The path goes with the offload that reads it.
std::string print_offload(const TrainConfig& c) {
  if (c.offload_optimizer == OffloadOptimizer::none) return "";
  return "--offload-optimizer " + std::string(mode_name(c.offload_optimizer)) + " --offload-path " +
         c.offload_path;
}
std::string printed_by_offload(const TrainConfig&) {
  return "";
}

// A size in MiB of fp32 elements: from one element (4 bytes; less would round to none) to 1 TiB, more than
// any host streams or exchanges at once (1e20 once wrapped into a chunk of one element).
constexpr FlagBound kMiBOfElements = {
    .low = 0x1p-18,
    .high = 0x1p20,
    .text = "must be from 0.000003814697265625 (one fp32 element) to 1048576 MiB"};

using K = FlagKind;
using C = TrainConfig;

const RunFlag kRunFlags[] = {
    {.names = "--model",
     .help = "preset name or a Hugging Face config.json (GPT-2 or LLaMA family)",
     .field = &config_field<&C::model>,
     .memory = true},
    {.names = "--data",
     .help = "directory of token shards (*_train_*.bin, *_val_*.bin) or a glob",
     .field = &config_field<&C::data>},
    {.names = "--make-vocab-size-divisible-by",
     .help = "pad the vocabulary to a multiple",
     .field = &config_field<&C::pad_vocab_multiple>,
     .show_default = true,
     .memory = true},
    {.names = "--seq-length",
     .help = "sequence length T (default: the model's positions)",
     .field = &config_field<&C::seq_len>,
     .memory = true,
     .trajectory = true,
     .bound = {.text = "must be positive"},
     .when_absent = "the model's positions"},
    {.names = "--micro-batch-size",
     .help = "sequences per micro-batch B",
     .field = &config_field<&C::micro_batch>,
     .deepspeed = "train_micro_batch_size_per_gpu",
     .show_default = true,
     .memory = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--global-batch-size",
     .help = "sequences per optimizer step (accumulates micro-batches; default: --grad-accum-steps of them)",
     .field = &config_field<&C::global_batch>,
     .deepspeed = "train_batch_size",
     .trajectory = true,
     .bound = {.text = "must be positive"},
     .when_absent = "--grad-accum-steps micro-batches per step"},
    {.names = "--grad-accum-steps",
     .help = "micro-batches per optimizer step (default: as --global-batch-size makes them, else 1)",
     .field = &config_field<&C::grad_accum_steps>,
     .deepspeed = "gradient_accumulation_steps",
     .bound = {.text = "must be positive"},
     .when_absent = "what --global-batch-size makes it, else 1"},
    {.names = "--precision",
     .help = "fp32, bf16 or fp16 (16-bit weights and activations, fp32 math)",
     .field = &input_field<&RunFlagInput::precision>,
     .memory = true,
     .trajectory = true,
     .print = &print_precision,
     .setting = &precision_setting},
    {.names = "--bf16",
     .help = "same as --precision bf16",
     .field = &input_field<&RunFlagInput::bf16>,
     .kind = K::switch_on,
     .memory = true},
    {.names = "--fp16",
     .help = "same as --precision fp16 (with dynamic loss scaling)",
     .field = &input_field<&RunFlagInput::fp16>,
     .kind = K::switch_on,
     .memory = true},
    {.names = "--exp-avg-dtype",
     .help = "Adam's first moment: fp32, bf16 (bf16 runs), fp8 (e4m3, a scale per 128) or int8 (dynamic map, "
             "a scale per 2048); the same as --exp-avg-sq-dtype",
     .field = &group_field<&C::precision, &PrecisionConfig::exp_avg>,
     .memory = true,
     .trajectory = true,
     .print = &print_moments},
    {.names = "--exp-avg-sq-dtype",
     .help =
         "Adam's second moment: fp32, bf16, fp8 or int8 (under --optimizer adam-mini, v is fp32 per block "
         "whatever this says)",
     .field = &group_field<&C::precision, &PrecisionConfig::exp_avg_sq>,
     .memory = true,
     .trajectory = true,
     .print = &printed_by_moments},
    {.names = "--o2-optimizer",
     .help = "Adam moments in bf16 (bf16 only): --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
     .field = &input_field<&RunFlagInput::o2_optimizer>,
     .kind = K::switch_on,
     .memory = true,
     .trajectory = true,
     .print = &printed_by_moments,
     .setting = &o2_optimizer_setting},
    {.names = "--main-grads-dtype",
     .help = "fp32 or bf16 (bf16 runs): the dtype gradients are accumulated and stored in",
     .field = &input_field<&RunFlagInput::main_grads_dtype>,
     .memory = true,
     .trajectory = true,
     .print = &print_main_grads,
     .setting = &main_grads_setting},
    {.names = "--o2-gradient",
     .help = "gradients accumulated and stored in bf16 (bf16 only): --main-grads-dtype bf16",
     .field = &group_field<&C::precision, &PrecisionConfig::o2_gradient>,
     .kind = K::switch_on,
     .memory = true,
     .trajectory = true,
     .print = &printed_by_main_dtypes},
    {.names = "--main-params-dtype",
     .help =
         "fp32 or none (bf16 runs): none keeps no fp32 weight copy, updating bf16 weights with stochastic "
         "rounding",
     .field = &input_field<&RunFlagInput::main_params_dtype>,
     .memory = true,
     .trajectory = true,
     .print = &print_main_params,
     .setting = &main_params_setting},
    {.names = "!--no-master-weights",
     .help = "no fp32 weight copy (bf16 only): --main-params-dtype none",
     .field = &group_field<&C::precision, &PrecisionConfig::master_weights>,
     .kind = K::switch_off,
     .memory = true,
     .trajectory = true,
     .print = &printed_by_main_dtypes},
    {.names = "--o2-stochastic-rounding",
     .help = "round bf16 Adam moments stochastically (seeded) instead of to nearest",
     .field = &group_field<&C::precision, &PrecisionConfig::o2_stochastic_rounding>,
     .kind = K::switch_on,
     .trajectory = true},
    {.names = "--loss-scale",
     .help = "fp16: a static loss scale instead of the dynamic one",
     .field = &config_field<&C::static_loss_scale>,
     .deepspeed = "fp16.loss_scale",
     .trajectory = true,
     .bound = {.text = "must be positive"}},
    {.names = "--initial-loss-scale",
     .help = "fp16: the dynamic scale's start",
     .field = &group_field<&C::loss_scaler, &LossScalerConfig::initial_scale>,
     .show_default = true},
    {.names = "--loss-scale-window",
     .help = "fp16: clean steps before the scale doubles",
     .field = &group_field<&C::loss_scaler, &LossScalerConfig::window>,
     .deepspeed = "fp16.loss_scale_window",
     .show_default = true,
     .trajectory = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--hysteresis",
     .help = "fp16: overflows tolerated before the scale halves",
     .field = &group_field<&C::loss_scaler, &LossScalerConfig::hysteresis>,
     .deepspeed = "fp16.hysteresis",
     .show_default = true,
     .trajectory = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--min-loss-scale",
     .help = "fp16: the dynamic scale's floor",
     .field = &group_field<&C::loss_scaler, &LossScalerConfig::min_scale>,
     .deepspeed = "fp16.min_loss_scale",
     .show_default = true,
     .trajectory = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--recompute-granularity",
     .help = "selective (LayerNorm and GELU outputs) or full (whole layers from their inputs)",
     .field = &input_field<&RunFlagInput::recompute_granularity>,
     .memory = true,
     .print = &print_recompute},
    {.names = "--recompute-method",
     .help = "full only: uniform (groups of N layers) or block (the first N layers); default uniform",
     .field = &input_field<&RunFlagInput::recompute_method>,
     .memory = true},
    {.names = "--recompute-num-layers",
     .help = "full only: N (default 1)",
     .field = &input_field<&RunFlagInput::recompute_num_layers>,
     .memory = true},
    {.names = "--recompute-activations",
     .help = "same as --recompute-granularity selective",
     .field = &input_field<&RunFlagInput::recompute_activations>,
     .kind = K::switch_on,
     .memory = true},
    {.names = "--lora-rank",
     .help = "LoRA: adapters of rank R on a frozen base (Hugging Face PEFT's formula)",
     .field = &group_field<&C::lora, &LoraConfig::rank>,
     .memory = true,
     .trajectory = true,
     .bound = {.text = "must be positive"},
     .when_absent = "no LoRA"},
    {.names = "--lora-alpha",
     .help = "LoRA: the adapters' output is scaled by alpha / rank",
     .field = &group_field<&C::lora, &LoraConfig::alpha>,
     .show_default = true,
     .trajectory = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--lora-rslora",
     .help =
         "LoRA: scale the adapters' output by alpha / sqrt(rank) (PEFT's use_rslora) instead of alpha / rank",
     .field = &group_field<&C::lora, &LoraConfig::rslora>,
     .kind = K::switch_on,
     .trajectory = true},
    {.names = "--lora-dropout",
     .help = "LoRA: dropout probability on the adapters' input, in [0, 1)",
     .field = &group_field<&C::lora, &LoraConfig::dropout>,
     .show_default = true,
     .trajectory = true,
     .bound = {.low = 0, .high = 1, .text = "must be in [0, 1)"}},
    {.names = "--lora-target",
     .help = "LoRA: Hugging Face linear module names, comma-separated (q_proj,v_proj; c_attn), or all-linear",
     .field = &group_field<&C::lora, &LoraConfig::target>,
     .show_default = true,
     .memory = true,
     .trajectory = true},
    {.names = "--lora-train-modules",
     .help = "LoRA: base modules trained in full as well, comma-separated (lm_head, model.norm, ...)",
     .field = &group_field<&C::lora, &LoraConfig::train_modules>,
     .memory = true,
     .trajectory = true},
    {.names = "--base-quant",
     .help =
         "QLoRA: LoRA's frozen linear weights stored as nf4 (4-bit NormalFloat) or int8 in blocks of 64 "
         "with an absmax each, dequantized a tile at a time inside the products; none keeps the run's dtype",
     .field = &group_field<&C::base_quant, &BaseQuantConfig::format>,
     .show_default = true,
     .memory = true,
     .trajectory = true},
    {.names = "!--no-double-quant",
     .help =
         "QLoRA: keep the blocks' absmaxes in fp32 instead of 8 bits in blocks of 256 (double quantization)",
     .field = &group_field<&C::base_quant, &BaseQuantConfig::double_quant>,
     .kind = K::switch_off,
     .memory = true,
     .trajectory = true},
    {.names = "--dist-backend",
     .help = "auto (MPI under mpirun), single or mpi",
     .field = &config_field<&C::dist_backend>,
     .show_default = true},
    {.names = "--distributed-timeout-minutes",
     .help = "end the job when a rank waits longer than this for another rank in an exchange (a lost host or "
             "link), naming the exchange and the rank; fractions allowed, 0 = wait forever",
     .field = &config_field<&C::distributed_timeout_minutes>,
     .show_default = true,
     .bound = {.low = 0, .text = "must be 0 (no limit) or a positive number of minutes"}},
    {.names = "--tensor-model-parallel-size",
     .help =
         "tensor-parallel ranks: each holds 1/N of every layer's products, heads and vocabulary (Megatron's "
         "layout; the world is N x data-parallel ranks x pipeline stages)",
     .field = &config_field<&C::tensor_parallel>,
     .show_default = true,
     .memory = true,
     .bound = {.low = 1, .text = "must be at least 1"}},
    {.names = "--pipeline-model-parallel-size",
     .help = "pipeline stages: each holds an equal run of the layers (the embedding on the first, the final "
             "norm, head and loss on the last) and runs the step's micro-batches under the 1F1B schedule",
     .field = &config_field<&C::pipeline_parallel>,
     .show_default = true,
     .memory = true,
     .bound = {.low = 1, .text = "must be at least 1"}},
    {.names = "--sequence-parallel",
     .help = "with --tensor-model-parallel-size: split the norms and the residual stream by tokens too, with "
             "all-gathers and reduce-scatters instead of all-reduces",
     .field = &config_field<&C::sequence_parallel>,
     .kind = K::switch_on,
     .memory = true},
    {.names = "--zero-stage",
     .help =
         "ZeRO stage: 0 replicated, 1 shards master weights and moments, 2 also gradients, 3 also weights",
     .field = &config_field<&C::zero_stage>,
     .deepspeed = "zero_optimization.stage",
     .show_default = true,
     .memory = true,
     .bound = {.high = 3, .text = "must be 0, 1, 2 or 3"}},
    {.names = "--overlap-comm,!--no-overlap-comm",
     .help = "run the exchanges on a worker thread while the kernels go on (default on)",
     .field = &config_field<&C::overlap_comm>,
     .deepspeed = "zero_optimization.overlap_comm",
     .kind = K::switch_on},
    {.names = "--use-distributed-optimizer",
     .help = "same as --zero-stage 1",
     .field = &input_field<&RunFlagInput::distributed_optimizer>,
     .kind = K::switch_on,
     .memory = true},
    {.names = "--bucket-size-mb",
     .help = "MiB per gradient/weight exchange",
     .field = &config_field<&C::bucket_size_mb>,
     .show_default = true,
     .memory = true,
     .bound = kMiBOfElements},
    {.names = "--offload-optimizer",
     .help = "none, or nvme: master weights and Adam moments in files under --offload-path",
     .field = &config_field<&C::offload_optimizer>,
     .deepspeed = "zero_optimization.offload_optimizer.device",
     .show_default = true,
     .memory = true,
     .print = &print_offload},
    {.names = "--offload-path",
     .help = "directory for offloaded optimizer states",
     .field = &config_field<&C::offload_path>,
     .deepspeed = "zero_optimization.offload_optimizer.nvme_path",
     .print = &printed_by_offload},
    {.names = "--offload-chunk-mb",
     .help = "offloaded states stream in chunks of this many MiB of fp32 elements (two held per state)",
     .field = &config_field<&C::offload_chunk_mb>,
     .show_default = true,
     .memory = true,
     .bound = kMiBOfElements},
    {.names = "--deepspeed-config",
     .help =
         "DeepSpeed-style JSON (zero_optimization, batch sizes, bf16/fp16, optimizer, gradient_clipping); "
         "a key contradicting a flag given is an error",
     .field = &input_field<&RunFlagInput::deepspeed_config>,
     .memory = true},
    {.names = "--train-iters",
     .help = "optimizer steps",
     .field = &config_field<&C::train_iters>,
     .bound = {.low = 0, .open = true, .text = "must be a positive number of steps"}},
    {.names = "--lr",
     .help = "peak learning rate",
     .field = &config_field<&C::lr>,
     .deepspeed = "optimizer.params.lr",
     .show_default = true,
     .trajectory = true,
     .bound = {.text = "must be a finite number, 0 or more"}},
    {.names = "--min-lr",
     .help = "learning rate at the end of decay",
     .field = &config_field<&C::min_lr>,
     .show_default = true,
     .trajectory = true,
     .bound = {.text = "must be a finite number, 0 or more"}},
    {.names = "--lr-warmup-iters",
     .help = "linear warmup steps",
     .field = &config_field<&C::warmup_iters>,
     .show_default = true,
     .trajectory = true,
     .bound = {.text = "must not be negative"}},
    {.names = "--lr-decay-style",
     .help = "cosine, linear or constant",
     .field = &config_field<&C::decay_style>,
     .show_default = true,
     .trajectory = true},
    {.names = "--lr-decay-iters",
     .help = "the step at which decay reaches --min-lr (default: --train-iters; a resume continues the "
             "checkpoint's)",
     .field = &config_field<&C::lr_decay_iters>,
     .trajectory = true,
     .setting = &lr_decay_iters_setting,
     .bound = {.text = "must be a positive number of steps"},
     .when_absent = "--train-iters"},
    {.names = "--optimizer",
     .help = "adamw, or adam-mini: AdamW with one fp32 second moment per block of parameters (Zhang et al. "
             "2024; docs/optimizer_states.md)",
     .field = &config_field<&C::optimizer>,
     .show_default = true,
     .memory = true,
     .trajectory = true},
    {.names = "--optimizer-in-backward",
     .help =
         "update each block as soon as the backward has its gradients, which then live only until that "
         "update: the gradients cost the blocks in flight, not the model. Clipping and fp16 take a first "
         "pass for the norm (--clip-grad 0 saves it); no gradient accumulation (docs/optimizer_states.md)",
     .field = &config_field<&C::optimizer_in_backward>,
     .kind = K::switch_on,
     .memory = true},
    {.names = "--weight-decay",
     .help = "AdamW decoupled weight decay",
     .field = &group_field<&C::adam, &AdamWConfig::weight_decay>,
     .deepspeed = "optimizer.params.weight_decay",
     .show_default = true,
     .trajectory = true,
     .bound = {.text = "must be a finite number, 0 or more"}},
    {.names = "--adam-beta1",
     .help = "",
     .field = &group_field<&C::adam, &AdamWConfig::beta1>,
     .show_default = true,
     .trajectory = true},
    {.names = "--adam-beta2",
     .help = "",
     .field = &group_field<&C::adam, &AdamWConfig::beta2>,
     .show_default = true,
     .trajectory = true},
    {.names = "--adam-eps",
     .help = "",
     .field = &group_field<&C::adam, &AdamWConfig::eps>,
     .deepspeed = "optimizer.params.eps",
     .show_default = true,
     .trajectory = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--clip-grad",
     .help = "global gradient-norm clip, 0 = off",
     .field = &group_field<&C::adam, &AdamWConfig::clip_grad>,
     .deepspeed = "gradient_clipping",
     .show_default = true,
     .trajectory = true,
     .bound = {.text = "must be 0 (off) or positive"}},
    {.names = "--seed",
     .help = "initialisation and data-order seed",
     .field = &config_field<&C::seed>,
     .show_default = true,
     .trajectory = true},
    {.names = "!--no-shuffle",
     .help = "read windows in order instead of a seeded permutation",
     .field = &config_field<&C::shuffle>,
     .kind = K::switch_off,
     .trajectory = true},
    {.names = "--log-interval",
     .help = "steps between progress lines",
     .field = &config_field<&C::log_interval>,
     .show_default = true,
     .bound = {.low = 0, .open = true, .text = "must be positive"}},
    {.names = "--eval-interval",
     .help = "steps between validations, 0 = off",
     .field = &config_field<&C::eval_interval>,
     .show_default = true,
     .memory = true,
     .bound = {.text = "must be 0 (off) or positive"}},
    {.names = "--eval-iters",
     .help = "validation batches per evaluation",
     .field = &config_field<&C::eval_iters>,
     .show_default = true},
    {.names = "--init-from",
     .help = "start from these safetensors weights (a file, a model.safetensors.index.json or its folder)",
     .field = &config_field<&C::init_from>},
    {.names = "--save-weights",
     .help = "write the final weights as safetensors (shards beside it when it ends in .index.json)",
     .field = &config_field<&C::save_weights>},
    {.names = "--init-adapter",
     .help = "LoRA: start the adapters from a PEFT adapter directory (adapter_model.safetensors, "
             "adapter_config.json with the same r and lora_alpha)",
     .field = &config_field<&C::init_adapter>},
    {.names = "--save-adapter",
     .help = "LoRA: write the final adapters into DIR in PEFT's layout (adapter_model.safetensors, "
             "adapter_config.json)",
     .field = &config_field<&C::save_adapter>},
    {.names = "--save",
     .help = "directory of checkpoints (one step_N directory each)",
     .field = &config_field<&C::save>,
     .memory = true},
    {.names = "--save-interval",
     .help = "steps between checkpoints (0: only at the end)",
     .field = &config_field<&C::save_interval>,
     .show_default = true,
     .bound = {.text = "must be 0 (only at the end) or positive"}},
    {.names = "--keep-checkpoints",
     .help = "keep the newest K checkpoints, 0 = all",
     .field = &config_field<&C::keep_checkpoints>,
     .show_default = true,
     .bound = {.text = "must be 0 (all) or positive"}},
    {.names = "--exit-interval",
     .help = "save and exit 0 when the step is a multiple of N (0: never, as without the flag)",
     .field = &config_field<&C::exit_interval>,
     .bound = {.text = "must be 0 (never) or positive"}},
    {.names = "--load",
     .help = "resume from a checkpoint directory, or the newest verifying checkpoint of a --save directory",
     .field = &config_field<&C::load>,
     .memory = true},
    {.names = "--resume",
     .help = "auto: resume from the newest verifying checkpoint in --save, if any",
     .field = &config_field<&C::resume>,
     .memory = true},
    {.names = "--overwrite-checkpoints",
     .help = "start afresh in a --save directory that holds checkpoints, removing them (else refused)",
     .field = &config_field<&C::overwrite_checkpoints>,
     .kind = K::switch_on},
    {.names = "--verify-resume",
     .help = "train K steps, save, reload into a fresh trainer and check that the remaining steps' losses "
             "and the final state match the uninterrupted run",
     .field = &config_field<&C::verify_resume>,
     .memory = true,
     .bound = {.text = "must be a positive number of steps"},
     .when_absent = "no check"},
    {.names = "--out",
     .help = "directory for metrics.jsonl and memory.json",
     .field = &config_field<&C::out>,
     .show_default = true},
    {.names = "--device",
     .help = "the device the run plans for and trains on: cpu, or cuda / cuda:N (one NVIDIA GPU, in a build "
             "with CUDA; a build without it says so)",
     .field = &config_field<&C::device>,
     .show_default = true,
     .memory = true,
     .per_rank = true},
    // Not a trajectory flag: like --device, a resume may change it (a GPU checkpoint resumes on the CPU).
    {.names = "--tf32",
     .help = "with --device cuda: fp32 products on TF32 tensor cores (10-bit mantissa inputs, fp32 sums), "
             "faster and less exact; without it fp32 products are fp32, as the CPU's",
     .field = &config_field<&C::tf32>,
     .kind = K::switch_on},
    {.names = "--threads",
     .help = "OpenMP threads, 0 = all cores",
     .field = &config_field<&C::threads>,
     .show_default = true,
     .memory = true,
     .per_rank = true,
     .bound = {.text = "must be 0 (all cores) or positive"}},
    {.names = "--memory-report",
     .help = "print the memory plan and the ten largest activations with their lifetimes before training",
     .field = &config_field<&C::memory_report>,
     .kind = K::switch_on},
    {.names = "--memory-timeline",
     .help = "record the bytes held per category during each op of step 1 into OUT/memory_timeline.json "
             "(drawn by `memtrain report OUT`) and, given FILE, into FILE too (CSV if it ends in .csv, else "
             "JSON)",
     .field = &config_field<&C::memory_timeline>,
     .kind = K::optional_value},
};

}  // namespace

std::span<const RunFlag> run_flag_table() {
  return kRunFlags;
}

const RunFlag& run_flag(std::string_view name) {
  for (const RunFlag& flag : kRunFlags)
    if (flag.name() == name) return flag;
  throw std::logic_error("no run flag " + std::string(name));
}

}  // namespace mt
