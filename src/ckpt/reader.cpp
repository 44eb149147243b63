#include "ckpt/reader.h"

#include <cstdio>
#include <filesystem>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "core/error.h"

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

void load_model_states(const std::string& checkpoint_dir, const CheckpointState& state, Allocation& memory) {
  const CheckpointLayout& layout = state.layout;
  const Plan& plan = memory.plan();
  const std::string where = "resume from " + checkpoint_dir + ": ";
  if (layout.num_params != plan.num_params)
    fail_usage(where + "it holds " + std::to_string(layout.num_params) + " parameters, this model " +
               std::to_string(plan.num_params) + " (--model differs)");
  if (layout.weights != plan.policy.weights || layout.moments != plan.policy.moments ||
      layout.moment_block != plan.policy.moment_block || layout.master != plan.policy.master_weights)
    fail_usage(where + "it stores weights " + std::string(dtype_name(layout.weights)) +
               (layout.master ? " + F32 master" : "") + ", moments " +
               std::string(dtype_name(layout.moments)) + "; this run " +
               std::string(dtype_name(plan.policy.weights)) +
               (plan.policy.master_weights ? " + F32 master" : "") + ", moments " +
               std::string(dtype_name(plan.policy.moments)) +
               " (--precision, --exp-avg-dtype or --main-params-dtype differ)");
  const RankFiles files(checkpoint_dir, layout);
  const HeldWeights weights = held_weights(memory);
  files.read({kWeightsTensor, weights.dtype, nullptr}, weights.range, weights.data);
  const std::vector<StateTensor> states = state_tensors(plan);
  memory.optimizer_state().visit(plan.shard_begin, plan.shard_end, StateAccess::write_all,
                                 [&](const StateWindow& w) {
                                   for (const StateTensor& t : states)
                                     files.read(t, {w.begin, w.end}, t.in_window(w));
                                 });
}

}  // namespace mt::ckpt
