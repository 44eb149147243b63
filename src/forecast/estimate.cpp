#include "forecast/estimate.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "config/check_config.h"
#include "config/run_flag_table.h"
#include "core/error.h"
#include "core/int_math.h"
#include "devices/devices.h"
#include "layout/run_layout.h"
#include "memory/report.h"
#include "model/pipeline_schedule.h"
#include "parallel/parallel_groups.h"

namespace mt {

namespace {

// Each rank's plan is laid out in turn (a fraction of a millisecond for a small model): a job of more ranks
// than this is the `plan` command's, which lays out each pipeline stage's largest.
constexpr int64_t kMostEstimatedRanks = 65536;

std::string percent(double fraction) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
  return text;
}

std::string percent(int64_t part, int64_t whole) {
  return percent(whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0);
}

std::string describe_run(const Estimate& e) {
  const TrainConfig& c = e.config;
  std::ostringstream out;
  out << precision_name(c.precision.precision) << " | " << model_states_text(e.policy) << " | ZeRO stage "
      << (e.dp > 1 ? c.zero_stage : 0) << " over " << e.dp << " rank" << (e.dp == 1 ? "" : "s")
      << " | recompute " << recompute_name(c.recompute)
      << (c.offload_optimizer == OffloadOptimizer::nvme ? " | optimizer offloaded (nvme)" : "")
      << "\nB=" << c.micro_batch << " T=" << e.seq_len << " | " << e.accum << " micro-batch"
      << (e.accum == 1 ? "" : "es") << " per step and rank | ";
  if (e.on_gpu)
    out << "for the GPU (" << c.device << (e.gpu ? ", " + e.gpu->name : "") << ")";
  else
    out << "kernels sized for " << e.threads << " thread" << (e.threads == 1 ? "" : "s") << " per rank at "
        << cpu_isa_name(e.isa);
  const int pp = c.pipeline_parallel, tp = c.tensor_parallel;
  if (pp * tp == 1) return out.str();
  out << "\n";
  std::string flags;
  if (pp > 1) {
    out << "pipeline parallel " << pp << " (1F1B; the stages idle "
        << percent(pipeline_bubble_fraction(pp, e.accum)) << " of the step while it fills and drains) x ";
    flags += " --pipeline-model-parallel-size " + std::to_string(pp);
  }
  if (tp > 1) {
    out << "tensor parallel " << tp << (c.sequence_parallel ? " with sequence parallel" : "") << " x ";
    flags += " --tensor-model-parallel-size " + std::to_string(tp) +
             (c.sequence_parallel ? " --sequence-parallel" : "");
  }
  out << "data parallel " << e.dp << ": each rank's own plan, as `train" << flags << "` runs it";
  return out.str();
}

// "0-7", or "0, 2, 5" when not consecutive.
std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size()))
    return ranks.size() == 1 ? std::to_string(ranks.front())
                             : std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}

bool same_memory(const RankEstimate& a, const RankEstimate& b) {
  return a.place.pp_rank == b.place.pp_rank && a.bytes.bytes == b.bytes.bytes && a.peak.op == b.peak.op &&
         a.peak.live.bytes == b.peak.live.bytes;
}

std::string format_rank(const Estimate& e, const RankEstimate& r, const std::string& title) {
  std::ostringstream out;
  char line[160];
  const int64_t total = r.bytes.total();
  out << title << "\n";
  // On a GPU, beside each category what the device commits for its device buffers.
  const auto committed = [&](const std::string& text) { return e.on_gpu ? "  " + text : std::string(); };
  std::snprintf(line, sizeof line, "  %-18s %18s %12s %7s%s\n", "category", "bytes", "", "share",
                committed("committed on the GPU").c_str());
  out << line;
  for (Category c : kAllCategories) {
    std::snprintf(line, sizeof line, "  %-18s %18s %12s %7s%s\n", std::string(category_title(c)).c_str(),
                  with_commas(r.bytes[c]).c_str(), human_bytes(r.bytes[c]).c_str(),
                  percent(r.bytes[c], total).c_str(), committed(human_bytes(r.committed[c])).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-18s %18s %12s %7s%s\n", "total", with_commas(total).c_str(),
                human_bytes(total).c_str(), "", committed(human_bytes(r.committed.total())).c_str());
  out << line;
  // What the host itself fills and reads (the loaders' windows, the checkpoint stream); on the CPU the rest
  // is host memory too.
  std::snprintf(line, sizeof line, "  %-18s %18s %12s\n", "of which host",
                with_commas(r.host_bytes.total()).c_str(), human_bytes(r.host_bytes.total()).c_str());
  out << line;
  out << "  model states " << model_state_bytes_per_param(r.bytes, r.num_params)
      << " bytes/parameter; activation arena " << human_bytes(r.activations_packed) << " packed from "
      << human_bytes(r.activations_unpacked) << " of tensors\n";
  if (r.place.pp > 1)
    out << "  1F1B: activations of " << r.in_flight << " of " << e.accum << " micro-batch"
        << (e.accum == 1 ? "" : "es") << " at once, " << human_bytes(r.saved_per_micro_batch)
        << " kept by the first from its forward to its backward\n";
  if (r.offloaded_bytes > 0)
    out << "  optimizer offload file " << human_bytes(r.offloaded_bytes) << " (on disk, not in memory)\n";
  out << "  peak: " << human_bytes(r.peak.live.total()) << " live during op " << r.peak.op << " "
      << r.peak.name << " (" << r.peak.phase << "); " << human_bytes(total)
      << " held for the whole step (arenas are reserved at their packed size)\n";
  if (e.on_gpu)
    out << "  on the GPU: " << human_bytes(r.device_bytes()) << " of device buffers, committed in "
        << human_bytes(e.commit_granularity) << " granules: " << human_bytes(r.committed.total()) << " ("
        << with_commas(r.committed.total()) << " B)"
        << (e.gpu ? " + runtime overhead " + human_bytes(e.gpu->runtime_overhead_bytes) +
                        " (CUDA context, kernel images, cuBLASLt: no plan holds them; " +
                        (e.gpu->source == "published" ? "the profile's guess, not measured" : "measured") +
                        ") = " + human_bytes(e.device_need(r))
                  : std::string(" (and the runtime's own overhead, which --gpu NAME counts)"))
        << "; the host part in pinned host memory\n";
  if (e.device_memory) {
    const int64_t need = e.device_need(r);
    const int64_t headroom = *e.device_memory - need;
    if (headroom >= 0)
      out << "  fits in " << human_bytes(*e.device_memory) << ": headroom " << human_bytes(headroom) << " ("
          << percent(headroom, *e.device_memory) << " of the device)\n";
    else
      out << "  does NOT fit in " << human_bytes(*e.device_memory) << ": short by " << human_bytes(-headroom)
          << "\n";
  }
  return out.str();
}

// Each buffer's bytes as planned and as the device commits them (host buffers: pinned, as planned).
nlohmann::ordered_json buffers_json(const std::vector<PlannedBuffer>& buffers, int64_t granularity) {
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const PlannedBuffer& b : buffers) {
    if (b.bytes == 0) continue;
    json.push_back({{"category", std::string(category_key(b.category))},
                    {"space", b.space == MemorySpace::device ? "device" : "host"},
                    {"bytes", b.bytes},
                    {"committed_bytes", b.committed(granularity)}});
  }
  return json;
}

nlohmann::ordered_json bytes_json(const CategoryBytes& bytes) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (Category c : kAllCategories) json[std::string(category_key(c))] = bytes[c];
  return json;
}

// forward, loss or backward; of which micro-batch, on a pipeline stage (whose graph holds them all).
std::string phase_of(const Graph& graph, int op) {
  const PipelinePass& pass = pass_of(graph, op).pass;
  const std::string phase = graph.ops[op].kind() == OpKind::lm_head_loss ? "loss"
                            : pass.forward                               ? "forward"
                                                                         : "backward";
  return graph.pp > 1 ? phase + " of micro-batch " + std::to_string(pass.micro_batch) : phase;
}

// The activation bytes live from the end of the first micro-batch's forward (Graph::forward_end) into the
// rest of the step: what that micro-batch keeps for its backward.
int64_t saved_by_first_forward(const Graph& graph, int64_t alignment) {
  int64_t saved = 0;
  for (const TensorDesc& t : graph.table.tensors())
    if (t.category == Category::activations && t.has_lifetime() && t.first_op < graph.forward_end &&
        t.last_op >= graph.forward_end)
      saved += arena_aligned(t.bytes(), alignment);
  return saved;
}

std::vector<RankEstimate::GradientTensor> gradient_tensors(const Graph& graph, const Plan& plan) {
  std::vector<RankEstimate::GradientTensor> tensors;
  for (int id = 0; id < graph.table.size(); ++id)
    if (const int64_t offset = plan.grads.offset[id]; offset >= 0) {
      const TensorDesc& t = graph.table[id];
      tensors.push_back({t.name, t.bytes(), offset, t.first_op, t.last_op, graph.ops[t.first_op].name,
                         graph.ops[t.last_op].name});
    }
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.first_op < b.first_op; });
  return tensors;
}

}  // namespace

std::string format_gradient_lifetimes(const RankEstimate& rank) {
  std::ostringstream out;
  if (rank.gradient_tensors.empty()) return "";
  out << "gradients in the backward (--optimizer-in-backward): " << rank.gradient_tensors.size()
      << " tensors, each live from the first op writing it to the block's update, packed into "
      << with_commas(rank.bytes[Category::grads]) << " bytes\n";
  char line[320];
  for (const RankEstimate::GradientTensor& t : rank.gradient_tensors) {
    std::snprintf(line, sizeof line, "  %-18s %15s B at %13s  ops %d-%d (%s .. %s)\n", t.name.c_str(),
                  with_commas(t.bytes).c_str(), with_commas(t.offset).c_str(), t.first_op, t.last_op,
                  t.first_name.c_str(), t.last_name.c_str());
    out << line;
  }
  return out.str();
}

OpPeak peak_op(const Graph& graph, const Plan& plan) {
  const int num_ops = static_cast<int>(graph.ops.size());
  // Arena tensors enter at their first op and leave after their last: a running sum over a difference array.
  std::vector<CategoryBytes> change(num_ops + 1);
  CategoryBytes fixed = plan.bytes;
  for (Category category : kArenaCategories) {
    const ArenaLayout& layout = plan.arena(category);
    fixed[category] -= layout.size;
    for (int id = 0; id < graph.table.size(); ++id) {
      if (layout.offset[id] < 0) continue;
      const TensorDesc& t = graph.table[id];
      change[t.first_op][category] += arena_aligned(t.bytes(), plan.alignment);
      change[t.last_op + 1][category] -= arena_aligned(t.bytes(), plan.alignment);
    }
  }
  OpPeak peak;
  CategoryBytes live = fixed;
  for (int op = 0; op < num_ops; ++op) {
    for (Category c : kAllCategories) live[c] += change[op][c];
    if (peak.op < 0 || live.total() > peak.live.total())
      peak = {op, graph.ops[op].name, phase_of(graph, op), live};
  }
  return peak;
}

const RankEstimate& Estimate::largest() const {
  return *std::max_element(ranks.begin(), ranks.end(), [](const RankEstimate& a, const RankEstimate& b) {
    return a.bytes.total() < b.bytes.total();
  });
}

int64_t Estimate::device_need(const RankEstimate& r) const {
  if (!on_gpu) return r.bytes.total();
  return r.committed.total() + (gpu ? gpu->runtime_overhead_bytes : 0);
}

Estimate estimate_run(const TrainConfig& config, int dp, std::optional<int64_t> device_memory, CpuIsa isa,
                      const GpuProfile* gpu) {
  if (dp < 1) fail_usage("--dp must be at least 1");
  check_config(config);
  check_flag_bounds(config, {"--tensor-model-parallel-size", "--pipeline-model-parallel-size"});
  const std::optional<int64_t> world = product_if_fits(int64_t{dp} * config.tensor_parallel,
                                                       config.pipeline_parallel);  // each below 2^31
  if (!world || *world > kMostEstimatedRanks)
    fail_usage("--dp " + std::to_string(dp) + " x --tp " + std::to_string(config.tensor_parallel) +
               " x --pp " + std::to_string(config.pipeline_parallel) +
               " ranks: estimate lays out every rank's plan, at most " + std::to_string(kMostEstimatedRanks) +
               " ranks (memtrain plan --ranks N plans each stage's largest)");
  check_device_ranks(config.device, *world);
  Estimate e;
  e.config = config;
  e.dp = dp;
  e.threads = rank_threads(config, e.world());
  e.isa = isa;
  const DeviceTarget target = plan_target(config.device, isa, e.threads);
  e.on_gpu = target.kind == DeviceKind::cuda;
  if (gpu && !e.on_gpu) fail_gpu_without_cuda(gpu->gpu);
  if (gpu) e.gpu = *gpu;
  e.device_memory = device_memory ? device_memory : gpu ? std::optional(gpu->memory_bytes) : std::nullopt;
  for (int rank = 0; rank < e.world(); ++rank) {
    const ParallelRank place = parallel_rank(config, e.world(), rank);
    const RunLayout run = lay_out_run(config, place, target, parallel_buffer_bytes(place));
    if (rank == 0) {
      e.spec = run.spec;
      e.seq_len = run.seq_len;
      e.accum = run.accum;
      e.policy = run.plan.policy;
      e.commit_granularity = run.plan.commit_granularity;
      // A model-parallel rank holds part of the model, never a frozen one (LoRA is not run so).
      const bool whole = place.tp * place.pp == 1;
      e.padded_params = whole ? run.plan.num_params + run.model.graph.table.numel(Category::frozen)
                              : run.spec.padded_num_parameters();
      e.trainable_params = whole ? run.plan.num_params : e.padded_params;
    }
    const Graph& graph = run.model.graph;
    const Plan& plan = run.plan;
    const std::vector<PlannedBuffer> buffers = planned_buffers(graph.table, plan);
    e.ranks.push_back({.rank = rank,
                       .place = place,
                       .in_flight = micro_batches_in_flight(place.pp, place.pp_rank, run.accum),
                       .saved_per_micro_batch = saved_by_first_forward(graph, plan.alignment),
                       .bytes = plan.bytes,
                       .host_bytes = plan.host,
                       .committed = committed_bytes(buffers, plan.commit_granularity),
                       .buffers = e.on_gpu ? buffers : std::vector<PlannedBuffer>{},
                       .num_params = plan.num_params,
                       .shard_begin = plan.shard_begin,
                       .shard_end = plan.shard_end,
                       .shard_elems = plan.shard_elems,
                       .activations_packed = plan.activations.size,
                       .activations_unpacked = plan.activations.sum_of_tensors,
                       .offloaded_bytes = plan.offloaded_bytes,
                       .peak = peak_op(graph, plan),
                       .gradient_tensors = gradient_tensors(graph, plan)});
  }
  return e;
}

ModelStateLayout model_state_layout(const Estimate& e) {
  const RankEstimate& r = e.largest();
  return {
      .num_params = r.num_params,
      .shard_elems = r.shard_elems,
      // A model-parallel rank's part has no published count to name its padding by.
      .published_params = r.place.tp * r.place.pp == 1 ? e.spec.num_parameters() : r.num_params,
      .moment_block = e.policy.moment_block,
      .dp = e.dp,
      .stage = e.dp > 1 ? e.config.zero_stage : 0,
      .offloaded = e.config.offload_optimizer == OffloadOptimizer::nvme,
      .grads_in_backward = e.policy.grads_in_backward,
      .v_blocks = e.policy.v_blocks,
      .v_sums = e.policy.v_blocks > 0 && e.dp > 1 && e.config.zero_stage >= 2 && !e.policy.grads_in_backward,
      .planned = r.bytes};
}

std::string format_estimate(const Estimate& e) {
  std::ostringstream out;
  out << "model " << e.spec.name << ": " << with_commas(e.spec.num_parameters()) << " parameters ("
      << with_commas(e.padded_params) << " with the vocabulary padded to " << e.spec.padded_vocab_size
      << ")\n";
  if (e.trainable_params != e.padded_params)
    out << format_trainable(e.trainable_params, e.padded_params)
        << (e.config.base_quant.enabled() ? " | " + base_quant_text(e.config.base_quant) : "") << "\n";
  out << describe_run(e) << "\n";
  // Ranks of one stage with the same bytes and peak print once.
  std::vector<bool> printed(e.ranks.size(), false);
  for (size_t i = 0; i < e.ranks.size(); ++i) {
    if (printed[i]) continue;
    std::vector<int> same;
    for (size_t j = i; j < e.ranks.size(); ++j)
      if (!printed[j] && same_memory(e.ranks[j], e.ranks[i])) {
        printed[j] = true;
        same.push_back(e.ranks[j].rank);
      }
    std::string title =
        (same.size() == 1 ? "rank " : "ranks ") + rank_list(same) + (same.size() > 1 ? " (each)" : "");
    const ParallelRank& place = e.ranks[i].place;
    if (place.pp > 1)
      title += ", pipeline stage " + std::to_string(place.pp_rank) + " of " + std::to_string(place.pp);
    out << format_rank(e, e.ranks[i], title);
  }
  return out.str();
}

nlohmann::ordered_json estimate_json(const Estimate& e) {
  using json = nlohmann::ordered_json;
  json ranks = json::array();
  for (const RankEstimate& r : e.ranks) {
    json rank = {{"rank", r.rank},
                 {"stage", r.place.pp_rank},
                 {"dp_rank", r.place.dp_rank},
                 {"tp_rank", r.place.tp_rank},
                 {"in_flight_micro_batches", r.in_flight},
                 {"saved_activation_bytes_per_micro_batch", r.saved_per_micro_batch},
                 {"bytes", bytes_json(r.bytes)},
                 {"total_bytes", r.bytes.total()},
                 {"host_bytes", bytes_json(r.host_bytes)},
                 {"num_params", r.num_params},
                 {"shard", {r.shard_begin, r.shard_end}},
                 {"model_state_bytes_per_param", model_state_bytes_per_param(r.bytes, r.num_params)},
                 {"activations_packed_bytes", r.activations_packed},
                 {"activations_unpacked_bytes", r.activations_unpacked},
                 {"offloaded_optimizer_file_bytes", r.offloaded_bytes},
                 {"peak",
                  {{"op", r.peak.op},
                   {"name", r.peak.name},
                   {"phase", r.peak.phase},
                   {"total_bytes", r.peak.live.total()},
                   {"bytes", bytes_json(r.peak.live)}}}};
    if (e.on_gpu) {
      rank["device_bytes"] = r.device_bytes();
      rank["device_committed_bytes"] = bytes_json(r.committed);
      rank["device_committed_total_bytes"] = r.committed.total();
      rank["buffers"] = buffers_json(r.buffers, e.commit_granularity);
    }
    if (e.device_memory) {
      rank["fits"] = e.device_need(r) <= *e.device_memory;
      rank["headroom_bytes"] = *e.device_memory - e.device_need(r);
    }
    ranks.push_back(rank);
  }
  json out = {{"model", e.spec.name},
              {"parameters", e.spec.num_parameters()},
              {"padded_parameters", e.padded_params},
              {"trainable_parameters", e.trainable_params},
              {"precision", precision_name(e.config.precision.precision)},
              {"zero_stage", e.dp > 1 ? e.config.zero_stage : 0},
              {"dp", e.dp},
              {"tp", e.config.tensor_parallel},
              {"pp", e.config.pipeline_parallel},
              {"sequence_parallel", e.config.sequence_parallel},
              {"pipeline_bubble_fraction", pipeline_bubble_fraction(e.config.pipeline_parallel, e.accum)},
              {"micro_batch_size", e.config.micro_batch},
              {"seq_length", e.seq_len},
              {"micro_batches_per_step", e.accum},
              {"threads_per_rank", e.threads},
              {"cpu_isa", std::string(cpu_isa_name(e.isa))},
              {"recompute", recompute_name(e.config.recompute)},
              {"ranks", ranks}};
  out["device"] = e.config.device;
  if (e.on_gpu) out["commit_granularity_bytes"] = e.commit_granularity;
  if (e.gpu)
    out["gpu"] = {{"profile", e.gpu->gpu},
                  {"name", e.gpu->name},
                  {"source", e.gpu->source},
                  {"memory_bytes", e.gpu->memory_bytes},
                  {"runtime_overhead_bytes", e.gpu->runtime_overhead_bytes}};
  if (e.device_memory) {
    out["device_memory_bytes"] = *e.device_memory;
    out["fits"] = e.device_need(e.largest()) <= *e.device_memory;
  }
  return out;
}

}  // namespace mt
