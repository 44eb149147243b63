#include "forecast/config_search.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include "config/check_config.h"
#include "config/run_flag_table.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "forecast/oom_doctor.h"
#include "model/spec.h"
#include "parallel/parallel_groups.h"

namespace mt {

namespace {

// The precision settings worth trying, in the order of the usual advice: fp32, bf16, then bf16's O2 savings
// (moments, then gradients, then both), fp16, and last 8-bit moments (int8, then fp8), which cost AdamW time
// but work at any precision: on fp32, on bf16 and on bf16 with bf16 gradients (fp16 with them holds bf16's
// bytes). --no-master-weights is left out: it changes how the weights are updated (stochastic rounding), not
// only where bytes go.
std::vector<PrecisionConfig> precision_choices() {
  const auto with = [](Precision precision, MomentDType moments, bool gradient) {
    return PrecisionConfig{
        .precision = precision, .exp_avg = moments, .exp_avg_sq = moments, .o2_gradient = gradient};
  };
  std::vector<PrecisionConfig> choices = {
      with(Precision::fp32, MomentDType::fp32, false), with(Precision::bf16, MomentDType::fp32, false),
      with(Precision::bf16, MomentDType::bf16, false), with(Precision::bf16, MomentDType::fp32, true),
      with(Precision::bf16, MomentDType::bf16, true),  with(Precision::fp16, MomentDType::fp32, false)};
  for (MomentDType eight_bit : {MomentDType::int8, MomentDType::fp8}) {
    choices.push_back(with(Precision::fp32, eight_bit, false));
    choices.push_back(with(Precision::bf16, eight_bit, false));
    choices.push_back(with(Precision::bf16, eight_bit, true));
  }
  return choices;
}

// The search's count of configurations planned, told to SearchRequest::on_planned one call at a time.
class Progress {
 public:
  explicit Progress(const SearchRequest& request) : request_(request) {}
  void planned() {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++planned_;
    if (request_.on_planned) request_.on_planned(planned_);
  }
  int64_t count() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return planned_;
  }

 private:
  const SearchRequest& request_;
  mutable std::mutex mutex_;
  int64_t planned_ = 0;
};

// One lane of the search: a configuration's settings but the micro-batch and recompute, the micro-batches it
// runs (its ranks' share of the global batch, in at most `most_micro` samples) and the layers a stage holds.
struct Lane {
  TrainConfig config;
  int64_t first_micro = 1, per_rank = 1, most_micro = 1, stage_layers = 1;
};

// A lane's candidates that fit, per micro-batch from the smallest up, least recompute first: none if it
// fits, else selective if it fits, the fewest block layers that fit, and uniform 1 when no block count does.
// Memory falls as more layers are recomputed, so the fewest is found by bisection; a micro-batch for which
// not even full recompute of every layer fits ends the lane, as a larger one will not fit either.
class LaneSearch {
 public:
  LaneSearch(const SearchRequest& request, GraphCache& graphs, Progress& progress)
      : request_(request), graphs_(graphs), progress_(progress) {}

  std::vector<ConfigCandidate> search(const Lane& lane) {
    TrainConfig config = lane.config;
    for (int64_t micro = lane.first_micro; micro <= std::min(lane.per_rank, lane.most_micro); ++micro) {
      if (lane.per_rank % micro != 0) continue;
      config.micro_batch = micro;
      if (!search_micro_batch(config, lane.stage_layers)) break;
    }
    return std::move(fitting_);
  }

 private:
  bool search_micro_batch(TrainConfig config, int64_t n_layer) {
    config.recompute = {};
    if (try_add(config)) return true;
    config.recompute = {.granularity = RecomputeGranularity::selective};
    const bool selective = try_add(config);
    const int64_t layers = fewest_block_layers(
        config, n_layer, [this](const TrainConfig& c) { return plan(c).device_bytes <= request_.room(); });
    if (layers == 0) {
      config.recompute = full_recompute(RecomputeMethod::uniform, 1);
      return try_add(config) || selective;
    }
    config.recompute = full_recompute(RecomputeMethod::block, layers);
    return try_add(config);
  }
  ConfigCandidate plan(const TrainConfig& config) {
    ConfigCandidate c = evaluate_candidate(config, request_.ranks, request_.isa, graphs_);
    progress_.planned();
    return c;
  }
  bool try_add(const TrainConfig& config) {
    ConfigCandidate c = plan(config);
    if (c.device_bytes > request_.room()) return false;
    fitting_.push_back(std::move(c));
    return true;
  }

  const SearchRequest& request_;
  GraphCache& graphs_;
  Progress& progress_;
  std::vector<ConfigCandidate> fitting_;
};

// Threads for the search: the machine's cores, at most 8, and no more than each can hold the graph it lays
// out four times over in the memory free (a graph takes about 20 KB a layer: 575 MB of peak memory for a
// 30,000-layer LLaMA's estimate).
int default_search_threads(const ModelSpec& spec) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t per_graph = std::max<int64_t>(spec.n_layer, 1) * 20'000 * 4;
  const int64_t free = available_memory_bytes();
  const int64_t by_memory = free > 0 ? std::max<int64_t>(1, free / per_graph) : 1;
  return static_cast<int>(std::min<int64_t>({cores, 8, by_memory}));
}

// The lanes in the order threads take them: lanes that start on one graph walk the same graphs, and a thread
// that needs a graph another is laying out waits, so the first lane of each starting graph comes first, then
// the second of each, and so on.
std::vector<size_t> lanes_apart(const SearchRequest& request, const std::vector<Lane>& lanes) {
  std::map<std::string, std::vector<size_t>> by_graph;
  std::vector<const std::vector<size_t>*> graphs;  // in the order they first start a lane
  for (size_t i = 0; i < lanes.size(); ++i) {
    TrainConfig first = lanes[i].config;
    first.micro_batch = lanes[i].first_micro;
    const ParallelRank place = parallel_rank(first, request.ranks, 0);
    const DeviceTarget device = plan_target(first.device, request.isa, rank_threads(first, request.ranks));
    std::vector<size_t>& same = by_graph[GraphCache::key(first, place, device)];
    if (same.empty()) graphs.push_back(&same);
    same.push_back(i);
  }
  std::vector<size_t> order;
  for (size_t round = 0; order.size() < lanes.size(); ++round)
    for (const std::vector<size_t>* same : graphs)
      if (round < same->size()) order.push_back((*same)[round]);
  return order;
}

// Each lane's fitting candidates, on `threads` threads sharing `graphs`, in the lanes' order whichever
// finished first; the first lane's error (in that order) is rethrown once all have ended.
std::vector<std::vector<ConfigCandidate>> search_lanes(const SearchRequest& request,
                                                       const std::vector<Lane>& lanes, int threads,
                                                       GraphCache& graphs, Progress& progress) {
  std::vector<std::vector<ConfigCandidate>> found(lanes.size());
  std::vector<std::exception_ptr> failed(lanes.size());
  const std::vector<size_t> order = lanes_apart(request, lanes);
  std::atomic<size_t> next = 0;
  const auto work = [&] {
    for (size_t n = next++; n < order.size(); n = next++) try {
        found[order[n]] = LaneSearch(request, graphs, progress).search(lanes[order[n]]);
      } catch (...) {
        failed[order[n]] = std::current_exception();
      }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& worker : workers) worker.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  return found;
}

bool eight_bit(const PrecisionConfig& p) {
  return p.moments() == MomentDType::fp8 || p.moments() == MomentDType::int8;
}

bool is_plain(const PrecisionConfig& p) {
  return p.moments() == MomentDType::fp32 && !p.o2_gradient;
}

const ConfigCandidate* fastest(const std::vector<ConfigCandidate>& ranked, auto&& pred) {
  auto it = std::find_if(ranked.begin(), ranked.end(), pred);
  return it == ranked.end() ? nullptr : &*it;
}

std::string tokens_per_sec(const ConfigCandidate& c) {
  char text[64];
  std::snprintf(text, sizeof text, "%.0f tokens/s", c.cost.tokens_per_sec);
  return text;
}

// 8-bit moments cost AdamW time (their kernels are bound by arithmetic): at the top only when nothing with
// 16- or 32-bit moments fits, or what fits recomputes or shards more than the 8-bit moments cost.
void add_eight_bit_note(const std::vector<ConfigCandidate>& ranked, std::vector<std::string>& notes) {
  if (!eight_bit(ranked.front().config.precision)) return;
  const ConfigCandidate* wide =
      fastest(ranked, [](const ConfigCandidate& c) { return !eight_bit(c.config.precision); });
  if (wide)
    notes.push_back("8-bit moments at the top: predicted faster than the best with 16- or 32-bit moments (" +
                    describe_config(wide->config) + ", " + tokens_per_sec(*wide) + ")");
  else
    notes.push_back("8-bit moments at the top: nothing with 16- or 32-bit moments fits");
}

// The seeds' advice against this ranking: bf16 before fp16; the O2 optimizer first when model states
// overflow; recompute only as many layers as needed.
std::vector<std::string> advice_notes(const std::vector<ConfigCandidate>& ranked,
                                      const SearchRequest& request) {
  std::vector<std::string> notes;
  if (ranked.empty()) return notes;
  const ConfigCandidate& top = ranked.front();
  const ConfigCandidate* bf16 = fastest(
      ranked, [](const ConfigCandidate& c) { return c.config.precision.precision == Precision::bf16; });
  const ConfigCandidate* fp16 = fastest(
      ranked, [](const ConfigCandidate& c) { return c.config.precision.precision == Precision::fp16; });
  if (bf16 && fp16) {
    const std::string level(cpu_isa_name(request.isa));
    const DeviceTarget device = plan_target(request.base.device, request.isa, 1);
    // A CPU multiplies bf16 directly when its products need no conversion tiles.
    const bool native_bf16 = device_traits(device, DType::bf16, 1, 1).matmul_scratch_floats == 0;
    const std::string why = device.kind == DeviceKind::cuda ? "both at the tensor cores' 16-bit rate"
                            : native_bf16 ? "but fp16 products run as fp32 tiles at " + level
                                          : "and at " + level + " both run their products as fp32 tiles";
    notes.push_back(std::string(bf16 < fp16 ? "agrees" : "DISAGREES") + ": bf16 before fp16 (best bf16 " +
                    tokens_per_sec(*bf16) + ", best fp16 " + tokens_per_sec(*fp16) + "; same bytes, " + why +
                    ")");
  }

  // O2 optimizer first: at the top configuration's stage, when plain bf16 needs recompute to fit.
  const auto same_stage = [&](const ConfigCandidate& c) {
    return c.config.zero_stage == top.config.zero_stage;
  };
  const ConfigCandidate* plain_bare = fastest(ranked, [&](const ConfigCandidate& c) {
    return same_stage(c) && c.config.precision.precision == Precision::bf16 && is_plain(c.config.precision) &&
           c.config.recompute.granularity == RecomputeGranularity::none;
  });
  const ConfigCandidate* plain_recompute = fastest(ranked, [&](const ConfigCandidate& c) {
    return same_stage(c) && c.config.precision.precision == Precision::bf16 && is_plain(c.config.precision) &&
           c.config.recompute.granularity != RecomputeGranularity::none;
  });
  const ConfigCandidate* o2 = fastest(ranked, [&](const ConfigCandidate& c) {
    return same_stage(c) && c.config.precision.moments() == MomentDType::bf16 &&
           !c.config.precision.o2_gradient;
  });
  if (!plain_bare && plain_recompute && o2)
    notes.push_back(std::string(o2 < plain_recompute ? "agrees" : "DISAGREES") +
                    ": O2 optimizer first when bf16's model states leave too little room (ZeRO " +
                    std::to_string(top.config.zero_stage) + ": --o2-optimizer " + tokens_per_sec(*o2) +
                    ", plain bf16 with " + recompute_name(plain_recompute->config.recompute) + " " +
                    tokens_per_sec(*plain_recompute) + ")");

  add_eight_bit_note(ranked, notes);

  // Recompute no more than needed: the search keeps only the fewest layers that fit per micro-batch, so a
  // top configuration recomputing more than another of the same flags does so for a larger micro-batch.
  if (top.config.recompute.granularity != RecomputeGranularity::none) {
    const ConfigCandidate* less = fastest(ranked, [&](const ConfigCandidate& c) {
      return &c != &top && c.config.precision.precision == top.config.precision.precision &&
             c.config.precision.moments() == top.config.precision.moments() &&
             c.config.precision.o2_gradient == top.config.precision.o2_gradient &&
             c.config.zero_stage == top.config.zero_stage &&
             c.config.offload_optimizer == top.config.offload_optimizer &&
             c.config.micro_batch < top.config.micro_batch;
    });
    if (less)
      notes.push_back(
          "DISAGREES: recompute only as many layers as needed: the top configuration recomputes "
          "more (" +
          recompute_name(top.config.recompute) + ") to fit micro-batch " +
          std::to_string(top.config.micro_batch) + ", predicted faster than micro-batch " +
          std::to_string(less->config.micro_batch) + " with " + recompute_name(less->config.recompute) +
          " (" + tokens_per_sec(*less) + ")");
    else
      notes.push_back("agrees: recompute only as many layers as needed (" +
                      recompute_name(top.config.recompute) + " is the least that fits at micro-batch " +
                      std::to_string(top.config.micro_batch) + ")");
  }
  return notes;
}

}  // namespace

double model_states_floor(const TrainConfig& c, int64_t params, int ranks) {
  if (c.lora.enabled()) return 0;
  const ModelStatePolicy policy = model_state_policy(c.precision);
  const double model_parallel = c.tensor_parallel * c.pipeline_parallel, dp = ranks / model_parallel;
  const double n = static_cast<double>(params) / model_parallel;
  double bytes = n * static_cast<double>(dtype_size(policy.weights)) / (c.zero_stage >= 3 ? dp : 1);
  if (c.offload_optimizer == OffloadOptimizer::none) {
    const double moments = (c.optimizer == OptimizerKind::adam_mini ? 1 : 2) * dtype_size(policy.moments);
    bytes += n * ((policy.master_weights ? 4 : 0) + moments) / (c.zero_stage >= 1 ? dp : 1);
  }
  return bytes;
}

RecomputeConfig full_recompute(RecomputeMethod method, int64_t layers) {
  return {.granularity = RecomputeGranularity::full, .method = method, .num_layers = layers};
}

int64_t fewest_block_layers(TrainConfig config, int64_t n_layer,
                            const std::function<bool(const TrainConfig&)>& fits) {
  config.recompute = full_recompute(RecomputeMethod::block, n_layer);
  if (!fits(config)) return 0;
  int64_t lo = 1, hi = n_layer;  // block `hi` fits; find the smallest that does
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    config.recompute = full_recompute(RecomputeMethod::block, mid);
    if (fits(config))
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi;
}

namespace {

// The candidate from each pipeline stage's plan and cost, `plan_stage(place, device)`: each stage holds its
// own layers (the first the embedding, the last the head) and micro-batches in flight; on a stage,
// data-parallel rank 0 holds the largest shard and the tensor-parallel ranks equal shares. The slowest stage
// sets the pipeline's pace.
template <typename PlanStage>
ConfigCandidate candidate_over_stages(const TrainConfig& config, int ranks, CpuIsa isa,
                                      PlanStage plan_stage) {
  ConfigCandidate c{.config = config, .rank_bytes = 0, .bytes = {}, .device_bytes = 0, .cost = {}};
  const int pp = config.pipeline_parallel;
  for (int stage = 0; stage < pp; ++stage) {
    const ParallelRank place = parallel_rank(config, ranks, stage * (ranks / pp));
    const DeviceTarget device = plan_target(config.device, isa, rank_threads(config, ranks));
    const auto [plan, cost, committed] = plan_stage(place, device);
    if (plan.bytes.total() > c.rank_bytes) {
      c.rank_bytes = plan.bytes.total();
      c.bytes = plan.bytes;
      c.device_bytes = device.kind == DeviceKind::cuda ? committed.total() : c.rank_bytes;
    }
    if (cost.step_s > c.cost.step_s) c.cost = cost;
  }
  return c;
}

}  // namespace

ConfigCandidate evaluate_candidate(const TrainConfig& config, int ranks, const HardwareProfile& profile,
                                   CpuIsa isa) {
  return candidate_over_stages(
      config, ranks, isa, [&](const ParallelRank& place, const DeviceTarget& device) {
        RunLayout run = lay_out_run(config, place, device, parallel_buffer_bytes(place));
        const StepCost cost = predict_step_cost(run, config, place.dp, profile);
        const CategoryBytes committed = committed_device_bytes(run.model.graph.table, run.plan);
        return GraphCache::Planned{.plan = std::move(run.plan), .cost = cost, .committed = committed};
      });
}

ConfigCandidate evaluate_candidate(const TrainConfig& config, int ranks, CpuIsa isa, GraphCache& graphs) {
  return candidate_over_stages(
      config, ranks, isa, [&](const ParallelRank& place, const DeviceTarget& device) {
        return graphs.plan(config, place, device, parallel_buffer_bytes(place), place.dp);
      });
}

namespace {

struct ModelParallelLayout {
  int tp = 1, pp = 1;
};

// The tensor- and pipeline-parallel sizes the trainer runs for this request: those whose product divides the
// ranks and that split the model evenly (heads and widths by T, layers by P), unless the configuration has a
// feature they do not run (not a candidate then).
std::vector<ModelParallelLayout> model_parallel_choices(const TrainConfig& base, const ModelSpec& spec,
                                                        int ranks) {
  std::vector<ModelParallelLayout> layouts;
  // T divides the heads and P the layers: the loops stop there, not at the ranks (up to 2^31 - 1).
  for (int64_t tp = 1; tp <= std::min<int64_t>(ranks, spec.n_head); ++tp)
    for (int64_t pp = 1; pp <= std::min<int64_t>(ranks / tp, spec.n_layer); ++pp) {
      if (ranks % (tp * pp) != 0) continue;
      TrainConfig config = base;
      config.tensor_parallel = tp;
      config.pipeline_parallel = pp;
      config.zero_stage = 0;
      try {
        check_tensor_parallel_flags(config, spec, base.seq_len != 0 ? base.seq_len : spec.n_positions);
        check_pipeline_parallel_flags(config, spec);
        layouts.push_back({static_cast<int>(tp), static_cast<int>(pp)});
      } catch (const Error&) {
      }
    }
  return layouts;
}

// The optimizers worth trying besides AdamW's ordinary step where the request asks for that: the update in
// the backward (one micro-batch a step, no model parallelism or offload), Adam-mini (no model parallelism,
// offload or LoRA) and both; a request that names one keeps it.
struct OptimizerChoice {
  OptimizerKind kind = OptimizerKind::adamw;
  bool in_backward = false;
};

// Whether `train` takes `config`: check_config's verdict, which refuses what the device does not run (on a
// GPU: Adam-mini, NVMe offload), so the search never proposes it.
bool trains(const TrainConfig& config) {
  try {
    check_config(config);
    return true;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::usage) throw;
    return false;
  }
}

std::vector<OptimizerChoice> optimizer_choices(const SearchRequest& request, bool model_parallel,
                                               OffloadOptimizer offload) {
  const TrainConfig& base = request.base;
  if (base.optimizer != OptimizerKind::adamw || base.optimizer_in_backward || !request.other_optimizers)
    return {{base.optimizer, base.optimizer_in_backward}};
  std::vector<OptimizerChoice> choices = {{}};
  if (model_parallel || offload != OffloadOptimizer::none) return choices;
  choices.push_back({OptimizerKind::adamw, true});
  if (!base.lora.enabled()) {
    choices.push_back({OptimizerKind::adam_mini, false});
    choices.push_back({OptimizerKind::adam_mini, true});
  }
  return choices;
}

}  // namespace

SearchResult search_configs(const SearchRequest& request) {
  const TrainConfig& base = request.base;
  if (request.ranks < 1) fail_usage("--ranks must be positive");
  if (request.device_memory <= 0) fail_usage("--device-memory must be positive");
  if (request.room() <= 0) fail_usage("--device-memory must be more than the GPU's runtime overhead");
  check_config(base);
  check_device_ranks(base.device, request.ranks);
  if (base.global_batch <= 0 || base.global_batch % request.ranks != 0)
    fail_usage("--global-batch-size must be a positive multiple of --ranks");
  const ModelSpec spec = resolve_model(base.model, base.pad_vocab_multiple);

  // A micro-batch's token ids alone (4 bytes each) must fit the device: the micro-batch sizes tried stop
  // there rather than at a global batch of up to 2^63 - 1 sequences.
  const int64_t seq_len = base.seq_len > 0 ? base.seq_len : spec.n_positions;
  const int64_t most_micro = std::max<int64_t>(1, request.room() / 4 / seq_len);
  SearchResult result;
  std::vector<Lane> lanes;
  for (const auto [tp, pp] : model_parallel_choices(base, spec, request.ranks))
    for (bool sequence_parallel : tp > 1 ? std::vector{false, true} : std::vector{false}) {
      // The global batch is split over the data-parallel ranks; tensor-parallel ranks and pipeline stages
      // share each sample.
      const int dp = request.ranks / (tp * pp);
      const int64_t per_rank = base.global_batch / dp;
      std::vector<int> stages = {0};
      if (dp > 1) stages = pp > 1 ? std::vector{0, 1} : std::vector{0, 1, 2, 3};  // as DeepSpeed's pipelines
      std::vector<OffloadOptimizer> offloads = {OffloadOptimizer::none};
      if (!base.offload_path.empty() && tp * pp == 1) offloads.push_back(OffloadOptimizer::nvme);
      for (const PrecisionConfig& precision : precision_choices())
        for (int stage : stages)
          for (OffloadOptimizer offload : offloads)
            for (const OptimizerChoice& optimizer : optimizer_choices(request, tp * pp > 1, offload)) {
              TrainConfig config = base;
              config.tensor_parallel = tp;
              config.pipeline_parallel = pp;
              config.sequence_parallel = sequence_parallel;
              config.precision = precision;
              config.zero_stage = stage;
              config.offload_optimizer = offload;
              config.optimizer = optimizer.kind;
              config.optimizer_in_backward = optimizer.in_backward;
              if (!trains(config)) continue;
              if (model_states_floor(config, spec.padded_num_parameters(), request.ranks) >
                  static_cast<double>(request.room())) {
                ++result.groups_skipped;
                continue;
              }
              // The update in the backward takes a step's samples in one micro-batch (no accumulation);
              // recompute counts a stage's layers.
              lanes.push_back({.config = config,
                               .first_micro = optimizer.in_backward ? per_rank : 1,
                               .per_rank = per_rank,
                               .most_micro = most_micro,
                               .stage_layers = spec.n_layer / pp});
            }
    }
  GraphCache graphs(request.profile);
  Progress progress(request);
  const int threads = request.search_threads > 0 ? request.search_threads : default_search_threads(spec);
  for (std::vector<ConfigCandidate>& found : search_lanes(request, lanes, threads, graphs, progress))
    std::move(found.begin(), found.end(), std::back_inserter(result.fitting));
  result.candidates_planned = progress.count();
  result.graphs_laid_out = graphs.graphs();
  result.arenas_packed = graphs.arenas_packed();
  std::stable_sort(
      result.fitting.begin(), result.fitting.end(),
      [](const ConfigCandidate& a, const ConfigCandidate& b) { return a.cost.step_s < b.cost.step_s; });
  result.notes = advice_notes(result.fitting, request);
  return result;
}

std::string describe_config(const TrainConfig& c) {
  const PrecisionConfig& p = c.precision;
  std::string s = precision_name(p.precision);
  if (p.moments() == MomentDType::bf16) s += " +O2-opt";
  if (eight_bit(p)) s += " +" + moment_dtype_name(p.moments()) + "-moments";
  if (p.o2_gradient) s += " +O2-grad";
  if (!p.master_weights) s += " -master";
  if (c.optimizer == OptimizerKind::adam_mini) s += ", Adam-mini";
  if (c.optimizer_in_backward) s += ", update in the backward";
  if (c.pipeline_parallel > 1) s += ", pipeline parallel " + std::to_string(c.pipeline_parallel);
  if (c.tensor_parallel > 1)
    s +=
        ", tensor parallel " + std::to_string(c.tensor_parallel) + (c.sequence_parallel ? " + sequence" : "");
  s += ", ZeRO " + std::to_string(c.zero_stage) + ", recompute " + recompute_name(c.recompute);
  s += ", micro-batch " + std::to_string(c.micro_batch);
  if (c.offload_optimizer != OffloadOptimizer::none)
    s += ", offload " + std::string(mode_name(c.offload_optimizer));
  if (c.lora.enabled()) s += ", LoRA rank " + std::to_string(c.lora.rank);
  if (c.base_quant.enabled())
    s += " over an " + std::string(kBaseQuantNames.name(c.base_quant.format)) + " base";
  return s;
}

std::string train_command_line(const TrainConfig& c, int ranks) {
  std::string s = ranks > 1 ? "mpirun -np " + std::to_string(ranks) + " memtrain train" : "memtrain train";
  const auto with_value = [&](std::initializer_list<std::string_view> flags) {
    for (std::string_view flag : flags) {
      s += ' ';
      s += flag_with_value(c, flag);
    }
  };
  with_value({"--model", "--data", "--train-iters"});
  s += command_line_args(c, {"--device"});
  s += command_line_args(c, {"--seq-length"});
  with_value({"--micro-batch-size", "--global-batch-size"});
  // What the search chose, then what the request fixed.
  s += command_line_args(c, {"--precision",
                             "--exp-avg-dtype",
                             "--main-grads-dtype",
                             "--main-params-dtype",
                             "--pipeline-model-parallel-size",
                             "--tensor-model-parallel-size",
                             "--sequence-parallel",
                             "--zero-stage",
                             "--recompute-granularity",
                             "--offload-optimizer",
                             "--optimizer",
                             "--optimizer-in-backward",
                             "--eval-interval",
                             "--threads",
                             "--lora-rank",
                             "--lora-alpha",
                             "--lora-dropout",
                             "--lora-target",
                             "--lora-train-modules",
                             "--base-quant",
                             "--no-double-quant"});
  return s;
}

}  // namespace mt
