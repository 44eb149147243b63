// Everything `memtrain train` is told: the model, data, schedule, precision, parallelism and outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/names.h"
#include "dist/communicator.h"
#include "memory/precision.h"
#include "model/base_quant.h"
#include "model/lora.h"
#include "model/recompute.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer_kind.h"
#include "optim/schedule.h"

namespace mt {

// --offload-optimizer: where master weights and Adam moments live.
enum class OffloadOptimizer { none, nvme };
inline constexpr auto kOffloadOptimizerNames = names_in_order<OffloadOptimizer>("none", "nvme");

// --resume: `off` is the flag's absence.
enum class ResumeMode { off, automatic };
inline constexpr auto kResumeModeNames = name_table(std::pair{ResumeMode::automatic, "auto"});

// `train --tokenizer`: the tokenizer that the data's shards and the model's vocabulary are checked against
// (config/data_vocabulary.h). Set by the train command, which opens it (cli/tokenizer_choice.h).
struct RunTokenizer {
  std::string name;  // as --tokenizer named it; empty: no --tokenizer
  int32_t vocab_size = 0;
  uint32_t fingerprint = 0;
  bool allow_mismatch = false;  // --allow-tokenizer-mismatch: shards of another tokenizer warn, not fail
};

struct TrainConfig {
  std::string model;                // preset name or config.json
  int64_t pad_vocab_multiple = 64;  // --make-vocab-size-divisible-by
  std::string data;                 // shard directory or glob
  bool loss_mask = false;           // not a flag: train sets it when the training shards have loss masks
  bool packed = false;              // not a flag: ... and when those pack several records a sequence
  RunTokenizer tokenizer;           // train's --tokenizer (not in the run flag table)
  int64_t seq_len = 0;              // 0: the model's n_positions
  int64_t micro_batch = 4;
  int64_t global_batch = 0;      // sequences per optimizer step; 0: from grad_accum_steps
  int64_t grad_accum_steps = 0;  // micro-batches per optimizer step; 0: from global_batch (default 1)
  int64_t train_iters = 0;
  float lr = 6e-4f;
  float min_lr = 0.0f;
  int64_t warmup_iters = 0;
  int64_t lr_decay_iters = 0;  // 0: --train-iters
  DecayStyle decay_style = DecayStyle::cosine;
  OptimizerKind optimizer = OptimizerKind::adamw;
  // Each block's update runs in the backward as soon as its gradients are complete, and its gradients live
  // only until then (--optimizer-in-backward).
  bool optimizer_in_backward = false;
  AdamWConfig adam;
  PrecisionConfig precision;
  RecomputeConfig recompute;
  LoraConfig lora;               // --lora-*: adapters on a frozen base
  BaseQuantConfig base_quant;    // --base-quant, --no-double-quant: QLoRA's quantized base
  LossScalerConfig loss_scaler;  // fp16 only
  float static_loss_scale = 0;   // --loss-scale N: a fixed scale instead of the dynamic one
  // Data parallelism: ranks from the launcher (mpirun), ZeRO sharding of the model states.
  DistBackend dist_backend = DistBackend::automatic;
  int zero_stage = 0;  // 0-3
  // Tensor parallelism (Megatron's layout): ranks that split each layer's products, the vocabulary and the
  // attention heads; the world is tensor_parallel x data-parallel x pipeline_parallel ranks, tensor-parallel
  // ranks adjacent, then data-parallel ones.
  int tensor_parallel = 1;
  bool sequence_parallel = false;  // the norms and the residual stream split by tokens over those ranks
  int pipeline_parallel = 1;       // stages, each an equal run of layers, under the 1F1B schedule
  double bucket_size_mb = 25;      // gradient and weight exchanges in chunks of this many MiB
  // A rank that waits longer than this for another in an exchange ends the job; 0: no limit. Megatron's
  // default: long enough for a peer's checkpoint write or weight load, short of an idle day.
  double distributed_timeout_minutes = 10;
  bool overlap_comm = true;  // exchanges run alongside the kernels; off: each one is waited for at once
  OffloadOptimizer offload_optimizer = OffloadOptimizer::none;
  std::string offload_path;     // nvme: directory for this run's optimizer-state files
  double offload_chunk_mb = 4;  // nvme: chunk of fp32 elements streamed per I/O, in MiB
  uint64_t seed = 1234;
  bool shuffle = true;
  int64_t log_interval = 1;
  int64_t eval_interval = 100;  // 0: no evaluation
  int64_t eval_iters = 10;
  std::string init_from;     // safetensors to start from
  std::string save_weights;  // safetensors to write at the end
  std::string init_adapter;  // LoRA: a PEFT adapter directory to start the adapters from
  std::string save_adapter;  // LoRA: a directory for the adapters in PEFT's layout, written at the end
  // Checkpoints (src/ckpt): saved into `save` every `save_interval` steps (0: only at the end or on a stop
  // signal), the newest `keep_checkpoints` kept (0: all); --exit-interval N saves and stops at multiples of
  // N.
  std::string save;
  int64_t save_interval = 0;
  int keep_checkpoints = 0;
  int64_t exit_interval = 0;
  std::string load;  // a checkpoint, or a save directory (its newest checkpoint that verifies)
  ResumeMode resume =
      ResumeMode::off;  // automatic: the newest verifying checkpoint in `save`, or a fresh start
  // A fresh run into a `save` that holds checkpoints removes them; without it such a run is refused.
  bool overwrite_checkpoints = false;
  // > 0: train this many steps, save, reload into a fresh trainer and check the continuation matches.
  int64_t verify_resume = 0;
  std::string out = "run";     // metrics.jsonl and memory.json
  std::string device = "cpu";  // --device: where the run plans for and trains (devices/devices.h)
  bool tf32 = false;           // --tf32: a GPU's fp32 products through TF32 tensor cores
  int threads = 0;             // 0: every core
  // Bytes one rank may plan (--memory-limit); 0: the machine's available memory shared by its ranks.
  int64_t memory_limit = 0;
  bool memory_report = false;  // print the plan and the largest activations before training
  // Empty: off. Otherwise the bytes per category during each op of step 1 go to OUT/memory_timeline.json
  // (read by `memtrain report`) and to this path (CSV when it ends in .csv, else JSON).
  std::string memory_timeline;
  // Flags whose value a file set instead (--deepspeed-config's keys), each with how errors name it
  // ("--deepspeed-config ds.json: train_batch_size").
  std::map<std::string, std::string, std::less<>> set_by;

  // The step at which the learning rate's decay ends: --lr-decay-iters, else --train-iters.
  int64_t decay_iters() const { return lr_decay_iters > 0 ? lr_decay_iters : train_iters; }
};

}  // namespace mt
