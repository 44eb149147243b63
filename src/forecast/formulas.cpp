#include "forecast/formulas.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/int_math.h"
#include "memory/report.h"

namespace mt {

namespace {

// Each term shards from the stage ZeRO gives it: optimizer states (master weights, moments) at 1, gradients
// at 2, weights at 3. Megatron's and MindSpeed's distributed optimizer is stage 1.
std::vector<FormulaTerm> terms(double weights, double grads, double master, double moments) {
  return {{Category::params, weights, 3},
          {Category::grads, grads, 2},
          {Category::master, master, 1},
          {Category::optim, moments, 1}};
}

bool sharded(const FormulaTerm& term, int stage, int dp) {
  return dp > 1 && stage >= term.sharded_from_stage;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// " + 8/2048": a term's scale bytes per block, after its bytes per element. Strings grow by appending, which
// GCC 12's -Wrestrict does not misread as "literal" + string does.
std::string scales_text(const FormulaTerm& t) {
  std::string text = " + ";
  text += number(t.bytes_per_block);
  text += "/";
  text += std::to_string(t.block);
  return text;
}

std::string parenthesized(const std::string& text) {
  std::string out = "(";
  out += text;
  out += ")";
  return out;
}

// A term's bytes per parameter as a formula writes it: "4", "(2 + 8/2048)".
std::string coefficient(const FormulaTerm& t) {
  if (t.block == 0) return number(t.bytes_per_param);
  return parenthesized(number(t.bytes_per_param) + scales_text(t));
}

// "6 + 12/d", "18", "18/d", "10 + 8/2048", "4 + (6 + 8/2048)/d": the terms kept whole, plus those divided
// among d ranks, with 8-bit moments' scales as bytes per block.
std::string total_per_param(const PublishedFormula& f, int stage) {
  double whole = 0, divided = 0;
  std::string whole_scales, divided_scales;
  for (const FormulaTerm& t : f.terms) {
    const bool shared = stage >= t.sharded_from_stage;
    (shared ? divided : whole) += t.bytes_per_param;
    if (t.block > 0) (shared ? divided_scales : whole_scales) += scales_text(t);
  }
  const std::string kept = number(whole) + whole_scales;
  const std::string shared =
      (divided_scales.empty() ? number(divided) : parenthesized(number(divided) + divided_scales)) + "/d";
  if (divided == 0) return kept;
  if (whole == 0) return shared;
  return kept + " + " + shared;
}

// A table row without the spaces an empty last column leaves.
std::string trimmed(const std::string& row) {
  return row.substr(0, row.find_last_not_of(" \n") + 1) + "\n";
}

std::string state_name(Category c) {
  return c == Category::optim ? "Adam moments" : std::string(category_title(c));
}

std::string why_not_counted(Category c) {
  switch (c) {
    case Category::activations:
      return "saved for backward and the backward's activation gradients, packed by lifetime";
    case Category::workspace:
      return "kernel scratch: the LM head's logits chunk, attention rows, conversion tiles";
    case Category::comm:
      return "the MPI communicator's receive buffer and ZeRO-2/3's per-block window buffers";
    case Category::other:
      return "token ids, the loaders' windows, the checkpoint buffer";
    default:
      return "";
  }
}

// Why a rank's planned bytes of a state are not the formula's `expected` (empty when they are).
std::string why_differs(const FormulaTerm& t, const ModelStateLayout& m, bool divided, double expected,
                        int64_t planned) {
  const bool optimizer_state = t.category == Category::master || t.category == Category::optim;
  if (m.offloaded && optimizer_state)
    return "offloaded: the rank's shard is in the --offload-path file; memory holds two chunk slots per "
           "state";
  if (static_cast<double>(planned) == expected) return "";
  if (t.category == Category::grads && m.grads_in_backward)
    return "--optimizer-in-backward: the gradients of the blocks in flight only (listed below)";
  if (t.category == Category::optim && m.v_blocks > 0)
    return "Adam-mini: v is one fp32 per block, " + with_commas(m.v_blocks) +
           " blocks, not one per parameter" +
           (m.v_sums ? ", and one fp64 sum of squares per block, the ranks' shards of the gradients added"
                     : "");
  // A shard of whole blocks holds whole blocks' scales, so the coefficient times S is exact.
  if (divided && static_cast<double>(planned) == t.per_param() * static_cast<double>(m.shard_elems))
    return "shard padding: every rank holds S = ceil(N/d)" +
           (m.moment_block > 0 ? " rounded up to whole blocks of " + std::to_string(m.moment_block) : "") +
           " = " + with_commas(m.shard_elems) + " elements, the last shard padded";
  const int64_t blocks = t.block > 0 ? ceil_div(m.num_params, t.block) : 0;
  if (!divided && t.block > 0 &&
      static_cast<double>(planned) == t.bytes_per_param * static_cast<double>(m.num_params) +
                                          t.bytes_per_block * static_cast<double>(blocks))
    return "a scale per block begun: ceil(N/" + std::to_string(t.block) + ") = " + with_commas(blocks) +
           " blocks of each moment, the last one of " + with_commas(m.num_params % t.block) + " elements";
  return "not the formula's layout";
}

// "bf16 weights + fp32 master, bf16 gradients", "fp32 weights and gradients".
std::string layout_text(const PrecisionConfig& p) {
  const std::string grads(kMainGradsDTypeNames.name(p.o2_gradient));
  if (p.precision == Precision::fp32) return "fp32 weights and gradients";
  return precision_name(p.precision) + " weights" +
         (p.master_weights ? " + fp32 master" : " without a master") + ", " + grads + " gradients";
}

// 8-bit moments on any layout: the run's weights, gradients and master weights (when it has them) as they are
// stored, and the moments at one byte each plus an fp32 scale per block of each (the policy's block).
PublishedFormula eight_bit_formula(const PrecisionConfig& p) {
  const ModelStatePolicy policy = model_state_policy(p);
  const auto bytes = [](DType d) { return static_cast<double>(dtype_size(d)); };
  std::vector<FormulaTerm> states = {{Category::params, bytes(policy.weights), 3},
                                     {Category::grads, bytes(policy.grads), 2}};
  if (policy.master_weights) states.push_back({Category::master, bytes(DType::f32), 1});
  states.push_back({.category = Category::optim,
                    .bytes_per_param = 2 * bytes(policy.moments),
                    .sharded_from_stage = 1,
                    .bytes_per_block = 2 * bytes(DType::f32),
                    .block = policy.moment_block});
  const std::string block = std::to_string(policy.moment_block);
  const std::string moments =
      p.moments() == MomentDType::int8
          ? "8-bit Adam (Dettmers et al. 2022): int8 moments, an fp32 absmax per block of " + block
          : "fp8 moments (Megatron-LM's --exp-avg-dtype fp8): e4m3, an fp32 scale per block of " + block;
  // The paper stops at one process; ZeRO's partitioning is applied above it.
  return {moments + " of each, with " + layout_text(p), "", 0, states};
}

}  // namespace

std::vector<PublishedFormula> published_formulas(const PrecisionConfig& p, int stage) {
  std::vector<PublishedFormula> rows;
  const std::string mindspeed = "MindSpeed O2 (bf16 with ";
  if (p.moments() == MomentDType::fp8 || p.moments() == MomentDType::int8)
    rows = {eight_bit_formula(p)};
  else if (p.precision == Precision::fp32 || !p.master_weights)
    ;  // no source tabulates fp32 Adam or bf16 weights without a master copy
  else if (p.moments() == MomentDType::fp32 && !p.o2_gradient)
    rows = {{"Megatron-LM, bf16/fp16 with fp32 gradients and the distributed optimizer", "", 1,
             terms(2, 4, 4, 8)}};
  else if (p.moments() == MomentDType::fp32)
    rows = {{"ZeRO (Rajbhandari et al. 2020), mixed-precision Adam with 16-bit gradients, K = 12", "", 3,
             terms(2, 2, 4, 8)},
            {mindspeed + "bf16 gradients), with the distributed optimizer", "", 1, terms(2, 2, 4, 8)}};
  else if (!p.o2_gradient)
    rows = {{mindspeed + "bf16 Adam moments), with the distributed optimizer", "", 1, terms(2, 4, 4, 4)}};
  else
    rows = {{mindspeed + "bf16 gradients and Adam moments), with the distributed optimizer", "", 1,
             terms(2, 2, 4, 4)}};
  for (PublishedFormula& f : rows) f.total = total_per_param(f, stage);
  return rows;
}

FormulaComparison compare_with_formula(const PublishedFormula& formula, const ModelStateLayout& m) {
  FormulaComparison out{.formula = formula, .terms = {}};
  const double n = static_cast<double>(m.num_params);
  for (const FormulaTerm& t : formula.terms) {
    const bool divided = sharded(t, m.stage, m.dp);
    const double expected = t.per_param() * (divided ? n / m.dp : n);
    const int64_t planned = m.planned[t.category];
    out.terms.push_back({t.category, expected, planned, why_differs(t, m, divided, expected, planned)});
    out.formula_total += expected;
    out.planned_total += planned;
  }
  return out;
}

std::string format_explanation(const std::vector<FormulaComparison>& comparisons, const ModelStateLayout& m) {
  std::ostringstream out;
  char line[240];
  out << "model states against the published formulas: N = " << with_commas(m.num_params)
      << " parameter elements held";
  if (m.num_params != m.published_params)
    out << " (the published " << with_commas(m.published_params) << " plus the vocabulary padding)";
  out << ", d = " << m.dp << ", ZeRO stage " << m.stage << "\n";
  if (comparisons.empty())
    out << "  no published formula stores model states this way (fp32 Adam, or bf16 without a master copy)\n";
  for (const FormulaComparison& c : comparisons) {
    out << "  " << c.formula.source << ": " << c.formula.total << " bytes/parameter";
    if (m.dp > 1 && m.stage > c.formula.highest_stage)
      out << " (ZeRO's stage-" << m.stage << " partitioning applied; the source stops at stage "
          << c.formula.highest_stage << ")";
    out << "\n";
    std::snprintf(line, sizeof line, "    %-16s %36s %18s %14s  %s\n", "state", "formula", "planned",
                  "difference", "why");
    out << line;
    for (const FormulaComparison::Term& t : c.terms) {
      const FormulaTerm& term = *std::find_if(c.formula.terms.begin(), c.formula.terms.end(),
                                              [&](const FormulaTerm& f) { return f.category == t.category; });
      const std::string expr = coefficient(term) + (sharded(term, m.stage, m.dp) ? " x N/d = " : " x N = ");
      std::snprintf(line, sizeof line, "    %-16s %36s %18s %14s  %s\n", state_name(t.category).c_str(),
                    (expr + with_commas(std::llround(t.formula_bytes))).c_str(),
                    with_commas(t.planned_bytes).c_str(),
                    with_commas(t.planned_bytes - std::llround(t.formula_bytes)).c_str(), t.why.c_str());
      out << trimmed(line);
    }
    std::snprintf(line, sizeof line, "    %-16s %36s %18s %14s\n", "total",
                  with_commas(std::llround(c.formula_total)).c_str(), with_commas(c.planned_total).c_str(),
                  with_commas(c.planned_total - std::llround(c.formula_total)).c_str());
    out << line;
  }
  out << "  not in any formula:\n";
  for (Category c : {Category::activations, Category::workspace, Category::comm, Category::other}) {
    std::snprintf(line, sizeof line, "    %-16s %18s  %s\n", std::string(category_title(c)).c_str(),
                  with_commas(m.planned[c]).c_str(), why_not_counted(c).c_str());
    out << line;
  }
  return out.str();
}

nlohmann::ordered_json explanation_json(const std::vector<FormulaComparison>& comparisons) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const FormulaComparison& c : comparisons) {
    nlohmann::ordered_json terms = nlohmann::ordered_json::array();
    for (const FormulaComparison::Term& t : c.terms)
      terms.push_back({{"category", category_key(t.category)},
                       {"formula_bytes", t.formula_bytes},
                       {"planned_bytes", t.planned_bytes},
                       {"why", t.why}});
    rows.push_back({{"source", c.formula.source},
                    {"bytes_per_param", c.formula.total},
                    {"terms", terms},
                    {"formula_total_bytes", c.formula_total},
                    {"planned_total_bytes", c.planned_total}});
  }
  return rows;
}

}  // namespace mt
