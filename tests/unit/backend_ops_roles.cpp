// Each op kind's operand roles (backend_ops.h): what the graph's comments in model/graph.h say each kernel
// reads, writes, accumulates into and uses as workspace. One overload per kind of OpArgs, chosen by
// std::visit, so a kind without one does not compile.
#include <functional>
#include <initializer_list>
#include <variant>

#include "backend_ops.h"

namespace mt::backend_ops {

namespace {

struct Roles {
  const std::function<void(const Operand&)>& f;
  bool training;

  void as(Role role, std::initializer_list<int> ids, bool grad = false) const {
    for (int id : ids)
      if (id >= 0) f({id, role, grad});
  }
  void read(std::initializer_list<int> ids) const { as(Role::read, ids); }
  void write(std::initializer_list<int> ids) const { as(Role::write, ids); }
  void update(std::initializer_list<int> ids) const { as(Role::update, ids); }
  void scratch(std::initializer_list<int> ids) const { as(Role::scratch, ids); }
  // Parameter gradients are accumulated into (the step's micro-batches add up).
  void grads(std::initializer_list<int> params) const { as(Role::update, params, /*grad=*/true); }
};

void roles(const ops::Embedding& a, const Roles& r) {
  r.read({a.wte, a.wpe, a.tokens, a.positions});
  r.write({a.out});
}

void roles(const ops::LayerNorm& a, const Roles& r) {
  r.read({a.inp, a.weight, a.bias});
  r.write({a.out, a.mean, a.rstd});
}

void roles(const ops::RmsNorm& a, const Roles& r) {
  r.read({a.inp, a.weight});
  r.write({a.out, a.rstd});
}

// The residual is copied into out before the product adds to it: out is written whole.
void roles(const ops::Linear& a, const Roles& r) {
  r.read({a.inp, a.residual, a.weight, a.bias});
  r.write({a.out});
  r.scratch({a.matmul_scratch, a.dequant_tile});
}

void roles(const ops::Rope& a, const Roles& r) {
  r.read({a.positions});
  r.update({a.qkv});
}

void roles(const ops::Attention& a, const Roles& r) {
  r.read({a.qkv, a.positions});
  r.write({a.out, a.lse});
  r.scratch({a.scratch});
}

void roles(const ops::Gelu& a, const Roles& r) {
  r.read({a.inp});
  r.write({a.out});
}

void roles(const ops::Swiglu& a, const Roles& r) {
  r.read({a.gate_up});
  r.write({a.out});
}

// Evaluation takes no gradients: dinp and the weight's gradient are left as they were.
void roles(const ops::LmHeadLoss& a, const Roles& r) {
  r.read({a.inp, a.weight, a.targets, a.loss_mask});
  r.write({a.losses});
  r.update({a.loss_sum});
  r.scratch({a.logits, a.logits_grad, a.matmul_scratch, a.row_stats});
  if (!r.training) return;
  r.write({a.dinp});
  r.grads({a.weight});
}

void roles(const ops::LayerNormBackward& a, const Roles& r) {
  r.read({a.inp, a.weight, a.mean, a.rstd, a.dout});
  r.update({a.dinp});
  r.grads({a.weight, a.bias});
}

void roles(const ops::RmsNormBackward& a, const Roles& r) {
  r.read({a.inp, a.weight, a.rstd, a.dout});
  r.update({a.dinp});
  r.grads({a.weight});
}

void roles(const ops::LinearBackward& a, const Roles& r) {
  r.read({a.inp, a.weight, a.dout});
  r.as(a.accumulate ? Role::update : Role::write, {a.dinp});
  r.scratch({a.matmul_scratch, a.dequant_tile});
  r.grads({a.weight, a.bias});
}

void roles(const ops::RopeBackward& a, const Roles& r) {
  r.read({a.positions});
  r.update({a.dqkv});
}

void roles(const ops::AttentionBackward& a, const Roles& r) {
  r.read({a.qkv, a.out, a.lse, a.dout, a.positions});
  r.write({a.dqkv});
  r.scratch({a.scratch});
}

// In place when dinp is dout: read first, so the tensor counts as updated.
void roles(const ops::GeluBackward& a, const Roles& r) {
  r.read({a.inp, a.dout});
  r.write({a.dinp});
}

void roles(const ops::SwigluBackward& a, const Roles& r) {
  r.read({a.gate_up, a.dout});
  r.write({a.dgate_up});
}

void roles(const ops::EmbeddingBackward& a, const Roles& r) {
  r.read({a.dout, a.tokens, a.positions});
  r.grads({a.wte, a.wpe});
}

void roles(const ops::Zero& a, const Roles& r) {
  r.write({a.out});
}

// The adapter adds into the base product's columns: out is updated.
void roles(const ops::Lora& a, const Roles& r) {
  r.read({a.inp, a.a, a.b});
  r.update({a.out});
  r.write({a.hidden});
  r.scratch({a.matmul_scratch, a.dropped});
}

void roles(const ops::LoraBackward& a, const Roles& r) {
  r.read({a.inp, a.a, a.b, a.hidden, a.dout});
  r.update({a.dinp});
  r.scratch({a.grad_hidden, a.matmul_scratch, a.dropped});
  r.grads({a.a, a.b});
}

void roles(const ops::AllReduce& a, const Roles& r) {
  r.update({a.data});
}

void roles(const ops::AllGather& a, const Roles& r) {
  r.read({a.inp});
  r.write({a.out});
}

void roles(const ops::ReduceScatter& a, const Roles& r) {
  r.read({a.inp});
  r.write({a.out});
}

void roles(const ops::PipeExchange& a, const Roles& r) {
  r.read({a.send});
  r.write({a.recv});
}

}  // namespace

void for_each_operand_role(const Op& op, bool training, const std::function<void(const Operand&)>& f) {
  const Roles r{f, training};
  std::visit([&](const auto& args) { roles(args, r); }, op.args);
}

}  // namespace mt::backend_ops
