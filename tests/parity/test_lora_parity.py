"""memtrain's LoRA against a PyTorch reference written here with PEFT's formula, y = x W^T + (alpha / r) x A^T B^T
(dropout 0) on every Hugging Face linear module of a layer: GPT-2's c_attn (one adapter on the fused q/k/v),
attn.c_proj, c_fc, mlp.c_proj (Conv1D weights, fan_in_fan_out); LLaMA's q_proj, k_proj, v_proj (one adapter
each, though memtrain fuses them), o_proj, gate_proj, up_proj, down_proj. The reference merges each adapter into
its module's weight, W + (alpha / r) B A, which is the same product. Same frozen base, same initial adapters
(memtrain's, drawn from its seed) and batches: the loss, every adapter gradient and the losses of 10 AdamW steps
on the adapters agree, the adapters after them too, and the base weights come back bit for bit. The adapter file
memtrain writes in PEFT's layout holds the trained adapters under PEFT's keys.

usage: test_lora_parity.py PARITY_DUMP gpt2|llama CONFIG_NAME
"""
import sys

import torch

import test_gpt2_parity as gpt2
import test_llama_parity as llama
from parity_common import (TOLERANCES, Checks, adamw_losses, loss_of, random_batches, random_params, rel,
                           run_dump)

RANK, ALPHA = 4, 8.0
# Adam's division by sqrt(v) amplifies fp32 differences of A's gradients, which start at 0 (B is 0) and stay
# tiny for the first steps: the updates agree to 1e-4 but for a few, hence the gradients at the end.
UPDATE_TOLERANCE = 1e-3


def family(arch, name):
    """(config.json, base parameters, forward, whether weights are Conv1D [in, out]) of a family's config."""
    if arch == "gpt2":
        c = gpt2.CONFIGS[name]
        params = random_params(gpt2.gpt2_param_shapes(c), lambda n: n.startswith("ln") or ".ln_" in n)
        config = {k: c[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}
        return c, config, params, gpt2.forward, True
    c = llama.CONFIGS[name]
    params = random_params(llama.llama_param_shapes(c), lambda n: n.endswith("norm.weight"))
    config = {k: v for k, v in c.items() if k not in ("B", "T")}
    config["model_type"] = "llama"
    return c, config, params, llama.forward, False


def merged(base, adapters, conv1d):
    """The base with every module's adapter added to its weight: W + s B A ([out, in]; transposed for Conv1D)."""
    params = dict(base)
    for a_name, a in adapters.items():
        if not a_name.endswith(".lora_A.weight"):
            continue
        module = a_name[: -len(".lora_A.weight")]
        delta = (ALPHA / RANK) * (adapters[module + ".lora_B.weight"] @ a)
        params[module + ".weight"] = base[module + ".weight"] + (delta.t() if conv1d else delta)
    return params


def main():
    dump, arch, name = sys.argv[1], sys.argv[2], sys.argv[3]
    c, config, base, forward, conv1d = family(arch, name)
    for p in base.values():
        p.requires_grad_(False)
    batches = random_batches(c)
    got = run_dump(dump, c, config, base, batches, "fp32", RANK, ALPHA)
    initial = {n[len("init."):]: t for n, t in got.items() if n.startswith("init.")}
    adapters = {n: t.clone().requires_grad_(True) for n, t in initial.items()}
    modules = {n[: -len(".lora_A.weight")] for n in adapters if n.endswith(".lora_A.weight")}
    expected = {n[: -len(".weight")] for n in base if n.endswith(".weight") and base[n].dim() == 2
                and "embed" not in n and "wte" not in n and "wpe" not in n and "lm_head" not in n}
    tol, check = TOLERANCES["fp32"], Checks()
    check(f"adapters on every linear module ({len(modules)})", 0.0 if modules == expected else 1.0, 0.0)
    # Never touched by memtrain, loss or its gradients can differ only through the adapters.
    check("no gradient of a frozen weight written", float(any(n.startswith("grad.") and n[5:] in base
                                                              for n in got)), 0.0)

    def lora_loss(tokens, targets):
        return loss_of(forward, merged(base, adapters, conv1d), c, tokens, targets)

    tokens, targets = batches[0]
    loss = lora_loss(tokens, targets)
    loss.backward()
    check("loss", abs(got["loss"].item() - loss.item()) / loss.item(), tol["loss"])
    for n, a in adapters.items():
        if n.endswith(".lora_B.weight") or a.grad.norm() > 0:  # A's gradient is 0 while B is 0
            check("grad " + n, rel(got["grad." + n], a.grad), tol["grad"])
        else:
            check("grad " + n + " (zero)", got["grad." + n].abs().max().item(), 0.0)
    for a in adapters.values():
        a.grad = None
    losses = adamw_losses(adapters, lora_loss, batches)
    for i, (a, b) in enumerate(zip(got["losses"].tolist(), losses), start=1):
        check(f"loss at step {i}", abs(a - b) / abs(b), tol["steps"])
    # The change, not the value: A's gradients (0 at step 1) are small next to A itself.
    for n, a in adapters.items():
        check("update over the steps " + n, rel(got["final." + n] - initial[n], a.detach() - initial[n]),
              UPDATE_TOLERANCE)
    # Every gradient where B is no longer 0, at memtrain's trained adapters.
    trained = {n: got["final." + n].clone().requires_grad_(True) for n in adapters}
    tokens, targets = batches[0]
    loss_of(forward, merged(base, trained, conv1d), c, tokens, targets).backward()
    for n, a in trained.items():
        check("grad after the steps " + n, rel(got["final_grad." + n], a.grad), tol["grad"])
    # The adapter file under PEFT's keys holds the trained adapters.
    prefix = "base_model.model." + ("transformer." if arch == "gpt2" else "")
    saved = {k[len("adapter/"):]: v for k, v in got.items() if k.startswith("adapter/")}
    check("PEFT adapter file: keys and values", 0.0 if saved.keys() == {prefix + n for n in adapters} and all(
        torch.equal(saved[prefix + n], got["final." + n]) for n in adapters) else 1.0, 0.0)
    unchanged = all(torch.equal(got["base." + n], base[n]) for n in base if "base." + n in got)
    check("base weights bitwise unchanged", 0.0 if unchanged and any(k.startswith("base.") for k in got) else 1.0,
          0.0)
    check.finish(f"LoRA parity {arch} {name}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
