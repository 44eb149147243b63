#include "model/adam_mini_blocks.h"

#include <stdexcept>
#include <string>

#include "model/model.h"

namespace mt {

namespace {

// Lines [0, n) in groups of `size` consecutive ones, numbered on from the tensor's blocks so far (where
// `b.block_of` is kept: a planner only counts them).
void add_groups(MiniBlocks& b, int64_t n, int64_t size, bool numbered) {
  if (numbered)
    for (int64_t i = 0; i < n; ++i) b.block_of.push_back(static_cast<int32_t>(b.count + i / size));
  b.count += n / size;
}

MiniBlocks tensor_blocks(const ModelSpec& spec, const ModelFamily& family, const TensorDesc& t,
                         bool numbered) {
  MiniBlocks b;
  const auto group = [&](int64_t n, int64_t size) { add_groups(b, n, size, numbered); };
  if (t.shape.size() == 1) {  // a norm's weight or a bias: one block
    b.cols = t.shape[0];
    group(1, 1);
    return b;
  }
  if (t.shape.size() != 2) throw std::logic_error("adam-mini: parameter " + t.name + " is not a matrix");
  b.rows = t.shape[0];
  b.cols = t.shape[1];
  const bool token_rows = t.name == family.embedding || t.name == family.positions || t.name == family.head;
  // The output neurons: rows of nn.Linear's [out, in], columns of Conv1D's [in, out]; tokens are rows.
  b.by_column = !token_rows && !family.block.weight_out_in;
  const int64_t outputs = b.by_column ? b.cols : b.rows;
  if (t.name.ends_with("." + family.block.qkv_proj + ".weight")) {
    const int64_t hs = spec.head_dim(), kv = spec.kv_dim();
    if (outputs != spec.n_embd + 2 * kv) throw std::logic_error("adam-mini: " + t.name + " is not q, k, v");
    group(spec.n_embd, hs);  // q per query head
    group(kv, hs);           // k per key/value head
    group(kv, 1);            // v per output neuron
  } else {
    group(outputs, 1);  // per output neuron, or per token
  }
  return b;
}

std::vector<MiniBlocks> partition(const ModelSpec& spec, const TensorTable& table,
                                  const std::vector<int>& params, bool numbered) {
  const ModelFamily family = model_family(spec);
  std::vector<MiniBlocks> blocks;
  int64_t first = 0;
  for (int id : params) {
    if (table[id].category != Category::params) continue;
    MiniBlocks b = tensor_blocks(spec, family, table[id], numbered);
    b.param = id;
    b.first = first;
    first += b.count;
    blocks.push_back(std::move(b));
  }
  return blocks;
}

}  // namespace

std::vector<MiniBlocks> adam_mini_blocks(const ModelSpec& spec, const TensorTable& table,
                                         const std::vector<int>& params) {
  return partition(spec, table, params, true);
}

int64_t adam_mini_block_count(const ModelSpec& spec, const TensorTable& table,
                              const std::vector<int>& params) {
  return adam_mini_block_count(partition(spec, table, params, false));
}

}  // namespace mt
