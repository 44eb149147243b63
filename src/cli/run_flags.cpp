#include "cli/run_flags.h"

#include "core/error.h"
#include "train/deepspeed_config.h"

namespace mt::cli {

namespace {

void add_recompute_flags(CLI::App& cmd, RunFlags& f) {
  cmd.add_option("--recompute-granularity", f.recompute_granularity,
                 "selective (LayerNorm and GELU outputs) or full (whole layers from their inputs)");
  cmd.add_option("--recompute-method", f.recompute_method,
                 "full only: uniform (groups of N layers) or block (the first N layers); default uniform");
  cmd.add_option("--recompute-num-layers", f.recompute_num_layers, "full only: N (default 1)");
  cmd.add_flag("--recompute-activations", f.recompute_activations,
               "same as --recompute-granularity selective");
}

void add_parallel_flags(CLI::App& cmd, RunFlags& f) {
  TrainConfig& c = f.config;
  cmd.add_option("--dist-backend", c.dist_backend, "auto (MPI under mpirun), single or mpi")
      ->capture_default_str();
  cmd.add_option("--zero-stage", c.zero_stage,
                 "ZeRO stage: 0 replicated, 1 shards master weights and moments, 2 also gradients, 3 also "
                 "weights")
      ->capture_default_str();
  cmd.add_flag("--overlap-comm,!--no-overlap-comm", c.overlap_comm,
               "run the exchanges on a worker thread while the kernels go on (default on)");
  cmd.add_flag("--use-distributed-optimizer", f.distributed_optimizer, "same as --zero-stage 1");
  cmd.add_option("--bucket-size-mb", c.bucket_size_mb, "MiB per gradient/weight exchange")
      ->capture_default_str();
  cmd.add_option("--offload-optimizer", c.offload_optimizer,
                 "none, or nvme: master weights and Adam moments in files under --offload-path")
      ->capture_default_str();
  cmd.add_option("--offload-path", c.offload_path, "directory for offloaded optimizer states");
  cmd.add_option("--offload-chunk-mb", c.offload_chunk_mb,
                 "offloaded states stream in chunks of this many MiB of fp32 elements (two held per state)")
      ->capture_default_str();
  cmd.add_option("--deepspeed-config", f.deepspeed_config,
                 "DeepSpeed-style JSON (zero_optimization, batch sizes, bf16/fp16); its keys override flags");
}

void add_checkpoint_flags(CLI::App& cmd, TrainConfig& c) {
  cmd.add_option("--save", c.save, "directory of checkpoints (one step_N directory each)");
  cmd.add_option("--save-interval", c.save_interval, "steps between checkpoints (0: only at the end)")
      ->capture_default_str();
  cmd.add_option("--keep-checkpoints", c.keep_checkpoints, "keep the newest K checkpoints, 0 = all")
      ->capture_default_str();
  cmd.add_option("--exit-interval", c.exit_interval, "save and exit 0 when the step is a multiple of N");
  cmd.add_option(
      "--load", c.load,
      "resume from a checkpoint directory, or the newest verifying checkpoint of a --save directory");
  cmd.add_option("--resume", c.resume, "auto: resume from the newest verifying checkpoint in --save, if any");
  cmd.add_option(
      "--verify-resume", c.verify_resume,
      "train K steps, save, reload into a fresh trainer and check that the remaining steps' losses "
      "and the final state match the uninterrupted run");
}

// --precision NAME, or Megatron's --bf16 / --fp16; they must not contradict each other.
Precision resolve_precision(const RunFlags& f) {
  if (f.bf16 && f.fp16) fail_usage("--bf16 and --fp16 exclude each other");
  const std::string alias = f.bf16 ? "bf16" : f.fp16 ? "fp16" : "";
  if (!alias.empty() && !f.precision.empty() && f.precision != alias)
    fail_usage("--precision " + f.precision + " contradicts --" + alias);
  return parse_precision(!alias.empty() ? alias : f.precision.empty() ? "fp32" : f.precision);
}

void add_precision_flags(CLI::App& cmd, RunFlags& f) {
  TrainConfig& c = f.config;
  cmd.add_option("--precision", f.precision,
                 "fp32, bf16 or fp16 (16-bit weights and activations, fp32 math)");
  cmd.add_flag("--bf16", f.bf16, "same as --precision bf16");
  cmd.add_flag("--fp16", f.fp16, "same as --precision fp16 (with dynamic loss scaling)");
  cmd.add_flag("--o2-optimizer", c.precision.o2_optimizer, "Adam moments in bf16 (bf16 only)");
  cmd.add_flag("--o2-gradient", c.precision.o2_gradient,
               "gradients accumulated and stored in bf16 (bf16 only)");
  cmd.add_flag("!--no-master-weights", c.precision.master_weights,
               "no fp32 weight copy: bf16 weights updated with stochastic rounding (bf16 only)");
  cmd.add_flag("--o2-stochastic-rounding", c.precision.o2_stochastic_rounding,
               "round bf16 Adam moments stochastically (seeded) instead of to nearest");
  cmd.add_option("--loss-scale", c.static_loss_scale, "fp16: a static loss scale instead of the dynamic one");
  cmd.add_option("--initial-loss-scale", c.loss_scaler.initial_scale, "fp16: the dynamic scale's start")
      ->capture_default_str();
  cmd.add_option("--loss-scale-window", c.loss_scaler.window, "fp16: clean steps before the scale doubles")
      ->capture_default_str();
  cmd.add_option("--hysteresis", c.loss_scaler.hysteresis,
                 "fp16: overflows tolerated before the scale halves")
      ->capture_default_str();
  cmd.add_option("--min-loss-scale", c.loss_scaler.min_scale, "fp16: the dynamic scale's floor")
      ->capture_default_str();
}

}  // namespace

TrainConfig RunFlags::resolve() const {
  TrainConfig c = config;
  c.precision.precision = resolve_precision(*this);
  if (distributed_optimizer) {
    if (c.zero_stage > 1) fail_usage("--use-distributed-optimizer (ZeRO stage 1) contradicts --zero-stage");
    c.zero_stage = 1;
  }
  if (!deepspeed_config.empty()) apply_deepspeed_config(deepspeed_config, c);
  c.recompute =
      parse_recompute(recompute_granularity, recompute_method, recompute_num_layers, recompute_activations);
  if (memory_timeline->count() > 0 && c.memory_timeline.empty())
    c.memory_timeline = c.out + "/memory_timeline.json";
  return c;
}

std::shared_ptr<RunFlags> add_run_flags(CLI::App& cmd) {
  auto flags = std::make_shared<RunFlags>();
  RunFlags& f = *flags;
  TrainConfig& c = f.config;
  cmd.add_option("--model", c.model, "preset name or a Hugging Face config.json (GPT-2 or LLaMA family)")
      ->required();
  cmd.add_option("--data", c.data, "directory of token shards (*_train_*.bin, *_val_*.bin) or a glob");
  cmd.add_option("--make-vocab-size-divisible-by", c.pad_vocab_multiple, "pad the vocabulary to a multiple")
      ->capture_default_str();
  cmd.add_option("--seq-length", c.seq_len, "sequence length T (default: the model's positions)");
  cmd.add_option("--micro-batch-size", c.micro_batch, "sequences per micro-batch B")->capture_default_str();
  cmd.add_option("--global-batch-size", c.global_batch,
                 "sequences per optimizer step (accumulates micro-batches)");
  cmd.add_option("--grad-accum-steps", c.grad_accum_steps, "micro-batches per optimizer step");
  add_precision_flags(cmd, f);
  add_recompute_flags(cmd, f);
  add_parallel_flags(cmd, f);
  cmd.add_option("--train-iters", c.train_iters, "optimizer steps");
  cmd.add_option("--lr", c.lr, "peak learning rate")->capture_default_str();
  cmd.add_option("--min-lr", c.min_lr, "learning rate at the end of decay")->capture_default_str();
  cmd.add_option("--lr-warmup-iters", c.warmup_iters, "linear warmup steps")->capture_default_str();
  cmd.add_option("--lr-decay-style", c.decay_style, "cosine, linear or constant")->capture_default_str();
  cmd.add_option("--weight-decay", c.adam.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  cmd.add_option("--adam-beta1", c.adam.beta1)->capture_default_str();
  cmd.add_option("--adam-beta2", c.adam.beta2)->capture_default_str();
  cmd.add_option("--adam-eps", c.adam.eps)->capture_default_str();
  cmd.add_option("--clip-grad", c.adam.clip_grad, "global gradient-norm clip, 0 = off")
      ->capture_default_str();
  cmd.add_option("--seed", c.seed, "initialisation and data-order seed")->capture_default_str();
  cmd.add_flag("!--no-shuffle", c.shuffle, "read windows in order instead of a seeded permutation");
  cmd.add_option("--log-interval", c.log_interval, "steps between progress lines")->capture_default_str();
  cmd.add_option("--eval-interval", c.eval_interval, "steps between validations, 0 = off")
      ->capture_default_str();
  cmd.add_option("--eval-iters", c.eval_iters, "validation batches per evaluation")->capture_default_str();
  cmd.add_option(
      "--init-from", c.init_from,
      "start from these safetensors weights (a file, a model.safetensors.index.json or its folder)");
  cmd.add_option("--save-weights", c.save_weights,
                 "write the final weights as safetensors (shards beside it when it ends in .index.json)");
  add_checkpoint_flags(cmd, c);
  cmd.add_option("--out", c.out, "directory for metrics.jsonl and memory.json")->capture_default_str();
  cmd.add_option("--threads", c.threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  cmd.add_flag("--memory-report", c.memory_report,
               "print the memory plan and the ten largest activations with their lifetimes before training");
  f.memory_timeline =
      cmd.add_option(
             "--memory-timeline", c.memory_timeline,
             "record the bytes held per category during each op of step 1 into "
             "OUT/memory_timeline.json (drawn by `memtrain report OUT`) and, given FILE, into FILE too "
             "(CSV if it ends in .csv, else JSON)")
          ->expected(0, 1)
          ->type_name("[FILE]");
  return flags;
}

}  // namespace mt::cli
