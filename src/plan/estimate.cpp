#include "plan/estimate.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "dist/communicator.h"
#include "memory/report.h"
#include "train/run_plan.h"
#include "train/train_flags.h"

namespace mt {

namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// The trainer's rule: --threads when given, else one thread per rank under MPI, else every core.
int rank_threads(const TrainConfig& config, int dp) {
  if (config.threads > 0) return config.threads;
  return dp > 1 ? 1 : omp_get_max_threads();
}

std::string percent(int64_t part, int64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", whole > 0 ? 100.0 * static_cast<double>(part) / whole : 0.0);
  return text;
}

std::string describe_run(const Estimate& e) {
  const TrainConfig& c = e.config;
  std::ostringstream out;
  out << precision_name(c.precision.precision) << " | weights " << dtype_name(e.policy.weights)
      << (e.policy.master_weights ? " + F32 master" : "") << ", grads " << dtype_name(e.policy.grads)
      << ", moments " << dtype_name(e.policy.moments) << " | ZeRO stage " << (e.dp > 1 ? c.zero_stage : 0)
      << " over " << e.dp << " rank" << (e.dp == 1 ? "" : "s") << " | recompute "
      << recompute_name(c.recompute) << (c.offload_optimizer == "nvme" ? " | optimizer offloaded (nvme)" : "")
      << "\nB=" << c.micro_batch << " T=" << e.seq_len << " | " << e.accum << " micro-batch"
      << (e.accum == 1 ? "" : "es") << " per step and rank | kernels sized for " << e.threads << " thread"
      << (e.threads == 1 ? "" : "s") << " per rank";
  return out.str();
}

bool same_memory(const RankEstimate& a, const RankEstimate& b) {
  return a.bytes.bytes == b.bytes.bytes && a.peak.op == b.peak.op && a.peak.live.bytes == b.peak.live.bytes;
}

std::string format_rank(const Estimate& e, const RankEstimate& r, const std::string& title) {
  std::ostringstream out;
  char line[160];
  const int64_t total = r.bytes.total();
  out << title << "\n";
  std::snprintf(line, sizeof line, "  %-18s %18s %12s %7s\n", "category", "bytes", "", "share");
  out << line;
  for (Category c : kAllCategories) {
    std::snprintf(line, sizeof line, "  %-18s %18s %12s %7s\n", std::string(category_title(c)).c_str(),
                  with_commas(r.bytes[c]).c_str(), human_bytes(r.bytes[c]).c_str(),
                  percent(r.bytes[c], total).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-18s %18s %12s\n", "total", with_commas(total).c_str(),
                human_bytes(total).c_str());
  out << line;
  out << "  model states " << model_state_bytes_per_param(r.bytes, r.num_params)
      << " bytes/parameter; activation arena " << human_bytes(r.bytes[Category::activations])
      << " packed from " << human_bytes(r.activations_unpacked) << " of tensors\n";
  if (r.offloaded_bytes > 0)
    out << "  optimizer offload file " << human_bytes(r.offloaded_bytes) << " (on disk, not in memory)\n";
  out << "  peak: " << human_bytes(r.peak.live.total()) << " live during op " << r.peak.op << " "
      << r.peak.name << " (" << (r.peak.backward ? "backward" : "forward") << "); " << human_bytes(total)
      << " held for the whole step (arenas are reserved at their packed size)\n";
  if (e.device_memory) {
    const int64_t headroom = *e.device_memory - total;
    if (headroom >= 0)
      out << "  fits in " << human_bytes(*e.device_memory) << ": headroom " << human_bytes(headroom) << " ("
          << percent(headroom, *e.device_memory) << " of the device)\n";
    else
      out << "  does NOT fit in " << human_bytes(*e.device_memory) << ": short by " << human_bytes(-headroom)
          << "\n";
  }
  return out.str();
}

nlohmann::ordered_json bytes_json(const CategoryBytes& bytes) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (Category c : kAllCategories) json[std::string(category_key(c))] = bytes[c];
  return json;
}

}  // namespace

OpPeak peak_op(const Graph& graph, const Plan& plan) {
  const int num_ops = static_cast<int>(graph.ops.size());
  // Arena tensors enter at their first op and leave after their last: a running sum over a difference array.
  std::vector<CategoryBytes> change(num_ops + 1);
  CategoryBytes fixed = plan.bytes;
  for (const auto& [category, layout] :
       {std::pair{Category::activations, &plan.activations}, std::pair{Category::workspace, &plan.workspace},
        std::pair{Category::comm, &plan.comm}}) {
    fixed[category] -= layout->size;
    for (int id = 0; id < graph.table.size(); ++id) {
      if (layout->offset[id] < 0) continue;
      const TensorDesc& t = graph.table[id];
      change[t.first_op][category] += aligned(t.bytes());
      change[t.last_op + 1][category] -= aligned(t.bytes());
    }
  }
  OpPeak peak;
  CategoryBytes live = fixed;
  for (int op = 0; op < num_ops; ++op) {
    for (Category c : kAllCategories) live[c] += change[op][c];
    if (peak.op < 0 || live.total() > peak.live.total())
      peak = {op, graph.ops[op].name, op > graph.loss_op, live};
  }
  return peak;
}

const RankEstimate& Estimate::largest() const {
  return *std::max_element(ranks.begin(), ranks.end(), [](const RankEstimate& a, const RankEstimate& b) {
    return a.bytes.total() < b.bytes.total();
  });
}

Estimate estimate_run(const TrainConfig& config, int dp, std::optional<int64_t> device_memory) {
  if (dp < 1) fail_usage("--dp must be at least 1");
  check_parallel_flags(config);
  check_checkpoint_flags(config);
  Estimate e;
  e.config = config;
  e.dp = dp;
  e.threads = rank_threads(config, dp);
  e.device_memory = device_memory;
  for (int rank = 0; rank < dp; ++rank) {
    const RunPlan run = plan_run(config, dp, rank, e.threads, mpi_buffer_bytes(dp));
    if (rank == 0) {
      e.spec = run.spec;
      e.seq_len = run.seq_len;
      e.accum = run.accum;
      e.policy = run.plan.policy;
    }
    e.ranks.push_back({.rank = rank,
                       .bytes = run.plan.bytes,
                       .num_params = run.plan.num_params,
                       .shard_begin = run.plan.shard_begin,
                       .shard_end = run.plan.shard_end,
                       .shard_elems = run.plan.shard_elems,
                       .activations_unpacked = run.plan.activations.sum_of_tensors,
                       .offloaded_bytes = run.plan.offloaded_bytes,
                       .peak = peak_op(run.model.graph, run.plan)});
  }
  return e;
}

ModelStateLayout model_state_layout(const Estimate& e) {
  const RankEstimate& r = e.largest();
  return {.num_params = r.num_params,
          .shard_elems = r.shard_elems,
          .published_params = e.spec.num_parameters(),
          .dp = e.dp,
          .stage = e.dp > 1 ? e.config.zero_stage : 0,
          .offloaded = e.config.offload_optimizer == "nvme",
          .planned = r.bytes};
}

std::string format_estimate(const Estimate& e) {
  std::ostringstream out;
  out << "model " << e.spec.name << ": " << with_commas(e.spec.num_parameters()) << " parameters ("
      << with_commas(e.ranks.front().num_params) << " with the vocabulary padded to "
      << e.spec.padded_vocab_size << ")\n"
      << describe_run(e) << "\n";
  // Ranks with the same bytes and peak print once.
  for (size_t first = 0; first < e.ranks.size();) {
    size_t last = first;
    while (last + 1 < e.ranks.size() && same_memory(e.ranks[last + 1], e.ranks[first])) ++last;
    const std::string title = first == last
                                  ? "rank " + std::to_string(first)
                                  : "ranks " + std::to_string(first) + "-" + std::to_string(last) + " (each)";
    out << format_rank(e, e.ranks[first], title);
    first = last + 1;
  }
  return out.str();
}

nlohmann::ordered_json estimate_json(const Estimate& e) {
  using json = nlohmann::ordered_json;
  json ranks = json::array();
  for (const RankEstimate& r : e.ranks) {
    json rank = {{"rank", r.rank},
                 {"bytes", bytes_json(r.bytes)},
                 {"total_bytes", r.bytes.total()},
                 {"num_params", r.num_params},
                 {"shard", {r.shard_begin, r.shard_end}},
                 {"model_state_bytes_per_param", model_state_bytes_per_param(r.bytes, r.num_params)},
                 {"activations_unpacked_bytes", r.activations_unpacked},
                 {"offloaded_optimizer_file_bytes", r.offloaded_bytes},
                 {"peak",
                  {{"op", r.peak.op},
                   {"name", r.peak.name},
                   {"phase", r.peak.backward ? "backward" : "forward"},
                   {"total_bytes", r.peak.live.total()},
                   {"bytes", bytes_json(r.peak.live)}}}};
    if (e.device_memory) {
      rank["fits"] = r.bytes.total() <= *e.device_memory;
      rank["headroom_bytes"] = *e.device_memory - r.bytes.total();
    }
    ranks.push_back(rank);
  }
  json out = {{"model", e.spec.name},
              {"parameters", e.spec.num_parameters()},
              {"padded_parameters", e.ranks.front().num_params},
              {"precision", precision_name(e.config.precision.precision)},
              {"zero_stage", e.dp > 1 ? e.config.zero_stage : 0},
              {"dp", e.dp},
              {"micro_batch_size", e.config.micro_batch},
              {"seq_length", e.seq_len},
              {"micro_batches_per_step", e.accum},
              {"threads_per_rank", e.threads},
              {"recompute", recompute_name(e.config.recompute)},
              {"ranks", ranks}};
  if (e.device_memory) {
    out["device_memory_bytes"] = *e.device_memory;
    out["fits"] = e.largest().bytes.total() <= *e.device_memory;
  }
  return out;
}

}  // namespace mt
