// The published model-state formulas (bytes per parameter, and what ZeRO or a distributed optimizer shards),
// term by term against the Plan's own counts, for `memtrain estimate --explain` and the tests that hold the
// plan to them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memory/category.h"
#include "memory/precision.h"

namespace mt {

// One model state of a formula: its bytes per parameter, and the ZeRO stage from which each of d ranks holds
// only 1/d of it (master weights and moments from 1, gradients from 2, weights from 3). 8-bit moments add
// `bytes_per_block` (their two fp32 scales) per `block` elements.
struct FormulaTerm {
  Category category;  // params, grads, master or optim
  double bytes_per_param = 0;
  int sharded_from_stage = 1;
  double bytes_per_block = 0;
  int64_t block = 0;  // 0: no blocks

  double per_param() const { return block > 0 ? bytes_per_param + bytes_per_block / block : bytes_per_param; }
};

struct PublishedFormula {
  std::string source;  // the paper or documentation, and the row of its table
  std::string total;   // as published, e.g. "6 + 12/d"
  int highest_stage;   // the source describes stages up to this one; above it, ZeRO's partitioning is applied
  std::vector<FormulaTerm> terms;
};

// The formulas whose storage layout is this precision configuration's; `stage` picks the published total
// quoted. With fp32 or bf16 moments none for fp32 or without master weights, which no source tabulates; with
// 8-bit moments one for every layout: 8-bit Adam's moment term on the run's weights, gradients and master.
std::vector<PublishedFormula> published_formulas(const PrecisionConfig& precision, int stage);

// A formula against a rank's planned bytes: each model state as published (coefficient x N, or x N/d when
// sharded) and as planned, with the reason for any difference, then the categories no formula counts.
struct FormulaComparison {
  PublishedFormula formula;
  struct Term {
    Category category;
    double formula_bytes;
    int64_t planned_bytes;
    std::string why;  // empty when equal
  };
  std::vector<Term> terms;
  double formula_total = 0;
  int64_t planned_total = 0;
};

// `num_params` N: the elements the plan holds (vocabulary padded); `shard_elems` S = ceil(N / d), rounded up
// to whole blocks of `moment_block` (ModelStatePolicy's; 0 without 8-bit moments); `published_params` the
// model's published count, to name the padding.
struct ModelStateLayout {
  int64_t num_params = 0, shard_elems = 0, published_params = 0, moment_block = 0;
  int dp = 1, stage = 0;
  bool offloaded = false;
  bool grads_in_backward = false;  // --optimizer-in-backward: the blocks in flight hold the gradients
  int64_t v_blocks = 0;            // Adam-mini: its fp32 second moments, one per block
  bool v_sums = false;             // and an fp64 sum per block where the gradients are sharded
  CategoryBytes planned;
};

FormulaComparison compare_with_formula(const PublishedFormula& formula, const ModelStateLayout& layout);

// The comparisons as text, then what the formulas leave out (activations, workspace, communication, other).
std::string format_explanation(const std::vector<FormulaComparison>& comparisons,
                               const ModelStateLayout& layout);
nlohmann::ordered_json explanation_json(const std::vector<FormulaComparison>& comparisons);

}  // namespace mt
