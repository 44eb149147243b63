#include "ckpt/reader.h"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "ckpt/saved_params.h"
#include "core/error.h"
#include "model/weights.h"

namespace mt::ckpt {

namespace {

// The manifest verifies and state.json agrees with it.
void verify(const std::string& dir, std::span<char> buffer) {
  const Manifest manifest = verify_checkpoint(dir, buffer);
  const CheckpointState state = read_state(dir);
  if (state.step != manifest.step || state.layout.world != manifest.world)
    fail_data(dir + "/" + kStateFile + ": step " + std::to_string(state.step) + " of " +
              std::to_string(state.layout.world) + " ranks, but " + kManifestFile + " says step " +
              std::to_string(manifest.step) + " of " + std::to_string(manifest.world));
}

}  // namespace

std::string select_checkpoint(const std::string& dir, const std::string& flag, bool fresh_if_none,
                              std::span<char> buffer) {
  std::error_code ec;
  if (!fresh_if_none && !std::filesystem::exists(dir, ec) && !ec)
    fail_data(flag + " " + dir + ": the path does not exist (expected a checkpoint or a --save directory)");
  if (is_checkpoint_dir(dir)) {
    verify(dir, buffer);
    return dir;
  }
  for (const std::string& candidate : list_checkpoints(dir)) {
    try {
      verify(candidate, buffer);
      return candidate;
    } catch (const Error& e) {
      std::fprintf(stderr, "memtrain: skipping checkpoint %s: %s\n", candidate.c_str(), e.what());
    }
  }
  if (!fresh_if_none) fail_data(flag + " " + dir + ": no checkpoint that verifies");
  return "";
}

namespace {

using ReadEntries = std::function<void(const StateTensor& t, FlatRange range, char* dst)>;

// Fills t's entries of flat range `range` at dst, in the device's memory, through `read`, a host piece at a
// time (a piece of blocked entries starts on a block, as the range does).
void read_into(Device& device, const StateTensor& t, FlatRange range, char* dst, const ReadEntries& read) {
  const int64_t size = static_cast<int64_t>(dtype_size(t.dtype));
  device.write(dst, t.bytes(range.begin, range.end), [&](char* piece, int64_t offset, int64_t bytes) {
    const int64_t first = range.begin + offset / size * t.per;
    read(t, {first, std::min(range.end, range.begin + (offset + bytes) / size * t.per)}, piece);
  });
}

// Every model-state buffer of this rank, each range filled by `read`.
void read_model_states(Allocation& memory, const ReadEntries& read) {
  Device& device = memory.device();
  const HeldWeights weights = held_weights(memory);
  read_into(device, {kWeightsTensor, weights.dtype, nullptr}, weights.range, weights.data, read);
  const std::vector<StateTensor> states = state_tensors(memory.plan());
  memory.optimizer_state().visit(memory.plan().shard_begin, memory.plan().shard_end, StateAccess::write_all,
                                 [&](const StateWindow& w) {
                                   for (const StateTensor& t : states)
                                     read_into(device, t, {w.begin, w.end}, t.in_window(w), read);
                                 });
}

// Fills flat range `range` of this rank's parameters (all unblocked entries) from the saved ranks that held
// each element.
void read_mapped(const SavedParams& saved, const std::vector<RankFiles>& files, const Allocation& memory,
                 const StateTensor& t, FlatRange range, char* dst) {
  const TensorTable& table = memory.table();
  const int64_t size = static_cast<int64_t>(dtype_size(t.dtype));
  for (int id = 0; id < table.size(); ++id) {
    const int64_t base = memory.plan().param_offset[id];
    if (base < 0) continue;
    const TensorDesc& param = table[id];
    const int64_t first = std::max(range.begin, base), last = std::min(range.end, base + param.numel());
    for (int64_t local = first - base; local < last - base;) {
      const ElementRun run = run_at(param, local, last - base - local);
      for (int64_t done = 0; done < run.count;) {
        const SavedRun from = saved.locate(param.name, run.whole + done, run.count - done);
        files[static_cast<size_t>(from.part)].read(t, {from.flat, from.flat + from.count},
                                                   dst + (base + local + done - range.begin) * size);
        done += from.count;
      }
      local += run.count;
    }
  }
}

}  // namespace

void load_model_states(const std::string& checkpoint_dir, const CheckpointState& state, Allocation& memory,
                       const ModelSpec& spec, const ModelPart& part) {
  const CheckpointLayout& layout = state.layout;
  const Plan& plan = memory.plan();
  const std::string where = "resume from " + checkpoint_dir + ": ";
  if (layout.weights != plan.policy.weights || layout.moments != plan.policy.moments ||
      layout.moment_block != plan.policy.moment_block || layout.master != plan.policy.master_weights)
    fail_usage(where + "it stores weights " + std::string(dtype_name(layout.weights)) +
               (layout.master ? " + F32 master" : "") + ", moments " +
               std::string(dtype_name(layout.moments)) + "; this run " +
               std::string(dtype_name(plan.policy.weights)) +
               (plan.policy.master_weights ? " + F32 master" : "") + ", moments " +
               std::string(dtype_name(plan.policy.moments)) +
               " (--precision, --exp-avg-dtype or --main-params-dtype differ)");
  if (layout.tp == part.tp && layout.pp() == part.pp) {  // the same flat numbering: this part's files
    const int64_t saved = layout.num_params[static_cast<size_t>(part.pp_rank)];
    if (saved != plan.num_params)
      fail_usage(where + "it holds " + std::to_string(saved) + " parameters, this model " +
                 std::to_string(plan.num_params) + " (--model differs)");
    const RankFiles files(checkpoint_dir, layout, part.index());
    read_model_states(memory,
                      [&](const StateTensor& t, FlatRange range, char* dst) { files.read(t, range, dst); });
    if (plan.policy.v_blocks > 0) read_adam_mini_v(checkpoint_dir, memory);
    return;
  }
  // A scale stands for a block of one part's flat numbering, which another split cuts elsewhere.
  if (layout.moment_block > 0)
    fail_usage(where + "its 8-bit moments were saved under --tensor-model-parallel-size " +
               std::to_string(layout.tp) + " --pipeline-model-parallel-size " + std::to_string(layout.pp()) +
               ": their block scales do not carry over exactly to " + std::to_string(part.tp) + " x " +
               std::to_string(part.pp) + "; resume with the sizes they were saved under");
  if (plan.policy.v_blocks > 0)
    throw std::logic_error("adam-mini runs without tensor or pipeline parallelism (check_config)");
  const SavedParams saved(spec, layout, where);
  std::vector<RankFiles> files;
  for (int p = 0; p < layout.parts(); ++p) files.emplace_back(checkpoint_dir, layout, p);
  read_model_states(memory, [&](const StateTensor& t, FlatRange range, char* dst) {
    read_mapped(saved, files, memory, t, range, dst);
  });
}

}  // namespace mt::ckpt
