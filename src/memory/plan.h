// The Plan: TensorTable + policy -> bytes per category, the layout of the parameter buffers, and the packing
// of every tensor with a lifetime into one arena per category (activations, workspace) by offset, so that
// memory freed by one op is reused by later ones. The estimator prints it; the trainer allocates exactly it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/int_math.h"
#include "core/moment_format.h"
#include "memory/category.h"
#include "memory/tensor_table.h"

namespace mt {

// How model states are stored: the dtypes of weights, gradients and Adam moments, and whether an fp32 master
// copy of the weights exists.
struct ModelStatePolicy {
  DType weights = DType::f32;
  DType grads = DType::f32;
  DType moments = DType::f32;  // u8, f8_e4m3: block-quantized, with an fp32 scale per block of each moment
  int64_t moment_block = 0;    // elements per scale; 0: no scales
  bool master_weights = false;
  // Adam-mini (--optimizer adam-mini): one fp32 second moment per block of its partition, this many in all;
  // 0: v per element, as m. Held whole (Adam-mini runs neither shard nor offload the optimizer state); its m
  // is stored as `moments` (blocked too: then only m has scales).
  int64_t v_blocks = 0;
  // --optimizer-in-backward: no flat gradient buffer; each block's gradients are a tensor with a lifetime
  // (Category::grads) packed in the gradient arena, updated and dropped within the backward.
  bool grads_in_backward = false;

  bool blocked_moments() const { return moment_block > 0; }
  // The 8-bit format of blocked moments.
  MomentFormat moment_format() const { return moments == DType::u8 ? MomentFormat::int8 : MomentFormat::fp8; }
  // The scales of `elems` consecutive moment elements from a block's start: one per block begun.
  int64_t moment_scales(int64_t elems) const { return blocked_moments() ? ceil_div(elems, moment_block) : 0; }
};

// ZeRO sharding of the model states over data-parallel ranks, seen from one rank. Parameters are numbered as
// one flat buffer; data-parallel rank r owns elements [r*S, (r+1)*S) with S = ceil(n / dp) rounded up to
// whole moment blocks, so an uneven size pads the last shard instead of being rejected. Stage 1 keeps only
// this rank's shard of the master weights and Adam moments, stage 2 also of the gradients, stage 3 also of
// the weights. Buffers are exchanged in place in collectives of at most `bucket_elems` elements; stages 2 and
// 3 exchange a block at a time through the comm tensors of the step schedule (model/zero_schedule.h).
struct Sharding {
  int dp = 1;       // the data-parallel group's ranks, which share the model states
  int dp_rank = 0;  // this rank's place among them
  int stage = 0;
  int64_t bucket_elems = 0;         // elements per collective call
  int64_t comm_internal_bytes = 0;  // what the communicators themselves hold: the world's and its groups'

  bool shards_optimizer() const { return stage >= 1 && dp > 1; }
  bool shards_grads() const { return stage >= 2 && dp > 1; }
  bool shards_weights() const { return stage >= 3 && dp > 1; }
};

// Optimizer offload (--offload-optimizer nvme): this rank's master weights and Adam moments live in a file
// under `path`, streamed through two chunk slots of `chunk_elems` elements per state (one being updated while
// the other is read or written), so those slots are all the master and optimizer memory the rank holds.
struct OptimizerOffload {
  bool enabled = false;
  std::string path;
  int64_t chunk_elems = 0;
};

// The bytes a tensor of `bytes` takes in an arena whose tensors start on multiples of `alignment` (the
// device's: KernelSizes::alignment).
constexpr int64_t arena_aligned(int64_t bytes, int64_t alignment) {
  return checked_add(bytes, alignment - 1) / alignment * alignment;
}

struct ArenaLayout {
  int64_t size = 0;             // bytes the arena needs
  int64_t sum_of_tensors = 0;   // bytes if no two tensors shared memory (aligned sizes)
  std::vector<int64_t> offset;  // per tensor id; -1 when the tensor is not in this arena
};

struct Plan {
  int64_t alignment = 0;           // of every packed tensor: the device's
  int64_t commit_granularity = 0;  // the device's (DeviceTraits::commit_granularity)
  ModelStatePolicy policy;
  Sharding sharding;
  // The flat parameter range whose master weights and moments this rank holds: [0, n) without sharding.
  int64_t shard_begin = 0, shard_end = 0, shard_elems = 0;  // shard_elems = S, padded; end clamped to n
  OptimizerOffload offload;                                 // chunk_elems clamped to the shard when enabled
  int64_t offloaded_bytes = 0;  // file bytes of master weights and moments when offloaded, not memory
  // Held in memory: elements of the master and each moment buffer (the shard, or the offload's chunk
  // slots), and each moment's fp32 scales (blocked moments; v has none under Adam-mini: v_scales()).
  int64_t state_elems = 0, moment_scales = 0;
  // Bytes of each moment buffer in memory: m, and v (per element, or Adam-mini's fp32 per block).
  int64_t m_bytes = 0, v_bytes = 0;
  // Adam-mini where a rank holds only its shard of the gradients (ZeRO-2, 3): one fp64 sum of squares per
  // block, the ranks' parts added together before v steps.
  int64_t v_sums_bytes = 0;
  CategoryBytes bytes;                // planned, per category
  CategoryBytes host;                 // the part of `bytes` in host memory (MemorySpace::host buffers)
  int64_t num_params = 0;             // elements of all parameter tensors
  std::vector<int64_t> param_offset;  // per tensor id: element offset into the parameter buffers, or -1
  ArenaLayout activations;
  ArenaLayout workspace;
  ArenaLayout comm;   // the step schedule's gathered weights and gradient sums (ZeRO-2/3)
  ArenaLayout grads;  // the blocks' gradients under ModelStatePolicy::grads_in_backward

  // The flat parameter range whose weights (gradients) this rank's buffer holds: all parameters, or its
  // shard when ZeRO-3 (ZeRO-2) shards them; no gradients when the blocks hold them (grads_in_backward).
  int64_t weights_begin() const { return sharding.shards_weights() ? shard_begin : 0; }
  int64_t weights_end() const { return sharding.shards_weights() ? shard_end : num_params; }
  int64_t grads_begin() const {
    return sharding.shards_grads() && !policy.grads_in_backward ? shard_begin : 0;
  }
  int64_t grads_end() const {
    return policy.grads_in_backward ? 0 : sharding.shards_grads() ? shard_end : num_params;
  }
  // The packing of a category of kArenaCategories.
  const ArenaLayout& arena(Category category) const;
  // Whether the flat gradient buffer holds every parameter's gradient.
  bool holds_all_grads() const { return !sharding.shards_grads() && !policy.grads_in_backward; }
  // Whether the ranks sum the gradients to the owner of each part (ZeRO-1 on), not to every rank: where no
  // rank holds all the optimizer state, and no rank steps Adam-mini's v from whole blocks.
  bool reduces_grads_to_owners() const { return sharding.shards_optimizer() && policy.v_blocks == 0; }
  // The second moment's scales: as m's, none when Adam-mini keeps v per block.
  int64_t v_scales() const { return policy.v_blocks > 0 ? 0 : moment_scales; }
};

// Packs the tensors of `category` that have lifetimes: largest first, each at the lowest offset, a multiple
// of `alignment`, that overlaps no already placed tensor whose lifetime intersects its own.
ArenaLayout pack_arena(const TensorTable& table, Category category, int64_t alignment);

// Each parameter's element offset in the flat parameter buffers (table order), -1 for other tensors.
std::vector<int64_t> flat_param_offsets(const TensorTable& table);

class ArenaPackCache;

// Every byte count of the plan, its total included, fits 64 bits, or SizeOverflow is thrown. `alignment` is
// the device's (KernelSizes::alignment). With `cache` (a search's), arenas it has packed before are not
// packed again, and the plan holds sizes only: no arena or parameter offsets. plan_tensors then
// size_model_states.
Plan make_plan(const TensorTable& table, int64_t alignment, const ModelStatePolicy& policy,
               const Sharding& sharding = {}, const OptimizerOffload& offload = {},
               ArenaPackCache* cache = nullptr);

// make_plan's first half, what the table decides: the parameters' count and offsets (each must be of
// `weights`, the policy's dtype), the bytes of the tensors without lifetimes and the packed arenas; no model
// states. A search sizes many configurations' states over one graph's tensors (forecast/graph_cache.h).
Plan plan_tensors(const TensorTable& table, int64_t alignment, DType weights,
                  ArenaPackCache* cache = nullptr);

// make_plan's second half, on plan_tensors' result: the model states of `policy` under `sharding` and
// `offload` (shards, master weights, flat gradients, moments and their scales), added to the tensors' bytes.
void size_model_states(Plan& plan, const ModelStatePolicy& policy, const Sharding& sharding,
                       const OptimizerOffload& offload);

// One buffer an Allocation (memory/allocation.h) takes from its device.
struct PlannedBuffer {
  Category category;
  MemorySpace space;
  int64_t bytes;
  // What it takes: whole granules of the device's memory (granularity 0: its bytes); host memory as asked.
  int64_t committed(int64_t granularity) const {
    return space == MemorySpace::device && granularity > 0 ? round_up(bytes, granularity) : bytes;
  }
};
// Every buffer an Allocation takes for `plan`, empty ones included: the plan's own (plan_buffers) and the
// table's tensors held on their own (tensor_buffers).
std::vector<PlannedBuffer> planned_buffers(const TensorTable& table, const Plan& plan);
// The model states' buffers (weights, master weights, flat gradients, the moments and their scales) and the
// four arenas: what the plan sizes, whatever the table.
std::vector<PlannedBuffer> plan_buffers(const Plan& plan);
// A buffer for each tensor that is neither a parameter nor in an arena: the same for every plan of the table.
std::vector<PlannedBuffer> tensor_buffers(const TensorTable& table);
// What the device commits for the buffers in its own memory, per category: each rounded up to `granularity`
// (as planned without one).
CategoryBytes committed_bytes(const std::vector<PlannedBuffer>& buffers, int64_t granularity);
// committed_bytes of every buffer of the plan at plan.commit_granularity: what a GPU's free memory drops by
// when they are made.
CategoryBytes committed_device_bytes(const TensorTable& table, const Plan& plan);

// Slots per offloaded state: the chunk being updated and the one in flight.
constexpr int64_t kOffloadSlots = 2;

}  // namespace mt
