"""QLoRA's base from the command line (issue 18, --base-quant): a LoRA run whose frozen linear weights are stored
in nf4 or int8 trains exactly as the same run over the dense weights those codes stand for. The reference
quantizes and dequantizes the base with tests/quant's numpy definition (blocks of 64 of each Hugging Face tensor
in its stored order, double quantization in blocks of 256) and trains the ordinary LoRA run from that file: the
per-step losses and gradient norms must be equal bit for bit, in fp32, bf16 and fp16, on GPT-2 (fused Conv1D
c_attn) and LLaMA (q, k, v and gate, up fused into one product, each quantized on its own). Also: the frozen
bytes are the quantized layout's, measured == planned, resume is bitwise, and the flags' misuse is a usage error.

usage: test_qlora.py   (QUANT_DUMP names tests/quant's quant_dump, for the NF4 table memtrain holds)
"""
import json
import os
import sys
import unittest
from pathlib import Path

import numpy as np

from memtrain_cli import CliTestCase, read_memory, read_metrics, read_safetensors, write_safetensors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))
import test_moment_quant as moment_quant  # noqa: E402
import test_weight_quant as weight_quant  # noqa: E402

LORA = {"lora_rank": 4, "lora_alpha": 8, "train_iters": 4}
# The Hugging Face linear modules whose weights are quantized (the embeddings, norms and head are not).
LINEAR = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight", "q_proj.weight",
          "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight", "up_proj.weight",
          "down_proj.weight")
FORMATS = {"nf4": ("nf4", True), "nf4, no double quantization": ("nf4", False), "int8": ("int8", True)}


def nf4_table(tmp: Path) -> np.ndarray:
    moment_quant.DUMP = os.environ["QUANT_DUMP"]
    moment_quant.dump("maps", tmp)
    return np.fromfile(tmp / "nf4.f32", dtype=np.float32)


def quantized_bytes(n: int, fmt: str, double: bool) -> int:
    """The plan's bytes of one tensor: codes, absmaxes (fp32, or codes + a scale per 256 + the offset), padded
    to 4."""
    blocks = -(-n // 64)
    codes = -(-n // 2) if fmt == "nf4" else n
    absmax = blocks + 4 * -(-blocks // 256) + 4 if double else 4 * blocks
    return -(-(codes + absmax) // 4) * 4


def dequantized_base(base: Path, out: Path, fmt: str, double: bool, nf4: np.ndarray) -> dict:
    """Writes the base with each linear weight replaced by what its codes stand for; returns name -> elements
    of the quantized tensors."""
    tensors, quantized = {}, {}
    for name, (shape, raw) in read_safetensors(base).items():
        if name.endswith(LINEAR):
            x = np.frombuffer(raw, dtype=np.float32).copy()
            codes, absmax = weight_quant.quantize(x, fmt, nf4)
            if double:
                absmax = weight_quant.double_quantize(absmax)[3]
            raw = weight_quant.dequantize(codes, absmax, len(x), fmt, nf4).tobytes()
            quantized[name] = len(x)
        tensors[name] = (shape, raw)
    write_safetensors(out, tensors)
    return quantized


class QloraFlags(CliTestCase):
    def test_misuse_is_a_usage_error(self):
        self.assert_train_fails(2, "--base-quant", "--lora-rank", base_quant="nf4")
        self.assert_train_fails(2, "--base-quant", "nf4 or int8", base_quant="nf3", lora_rank=4)
        self.assert_train_fails(2, "--no-double-quant", "--base-quant", no_double_quant=True, lora_rank=4)


class QloraRun(CliTestCase):
    def test_trains_as_the_dense_dequantized_base(self):
        nf4 = nf4_table(self.tmp)
        for model in ("gpt2-tiny", "llama-tiny"):
            base = self.tmp / f"{model}.safetensors"
            self.train(model=model, save_weights=base, out=self.tmp / f"{model}-base", expect=0)
            for label, (fmt, double) in FORMATS.items():
                dense = self.tmp / f"{model}-{fmt}-{double}.safetensors"
                quantized = dequantized_base(base, dense, fmt, double, nf4)
                for precision in ({}, {"bf16": True}, {"fp16": True}):
                    with self.subTest(model=model, format=label, precision=precision):
                        self.check_same_run(model, base, dense, quantized, fmt, double, precision)

    def check_same_run(self, model, base, dense, quantized, fmt, double, precision):
        flags = {"model": model, **LORA, **precision}
        quant_flags = {"base_quant": fmt, **({} if double else {"no_double_quant": True})}
        reference, run = self.tmp / "dense-run", self.tmp / "quantized-run"
        self.train(init_from=dense, out=reference, expect=0, **flags)
        self.train(init_from=base, out=run, expect=0, **flags, **quant_flags)
        for want, got in zip(read_metrics(reference), read_metrics(run), strict=True):
            self.assertEqual((got["loss"], got["grad_norm"]), (want["loss"], want["grad_norm"]),
                             f"step {want['step']}")
        memory, dense_memory = read_memory(run), read_memory(reference)
        self.assertEqual(memory["planned"], memory["measured"])
        weight_size = 2 if precision else 4
        want_frozen = (dense_memory["planned"]["frozen"] - weight_size * sum(quantized.values()) +
                       sum(quantized_bytes(n, fmt, double) for n in quantized.values()))
        self.assertEqual(memory["planned"]["frozen"], want_frozen)
        for category in ("params", "grads", "optim"):
            self.assertEqual(memory["planned"][category], dense_memory["planned"][category], category)

    def test_resume_is_bitwise(self):
        base = self.tmp / "base.safetensors"
        self.train(model="llama-tiny", save_weights=base, expect=0)
        for quant_flags in ({"base_quant": "nf4"}, {"base_quant": "int8", "no_double_quant": True, "bf16": True}):
            with self.subTest(flags=quant_flags):
                result = self.train("--verify-resume", 2, model="llama-tiny", init_from=base,
                                    out=self.tmp / "verify", expect=0, **{**LORA, "train_iters": 4}, **quant_flags)
                self.assertIn("verify-resume: PASS: saved after step 2", result.stdout)

    def test_the_base_quantization_is_recorded_and_must_repeat(self):
        base, saves = self.tmp / "base.safetensors", self.tmp / "saves"
        self.train(save_weights=base, expect=0)
        self.train(init_from=base, save=saves, base_quant="nf4", expect=0, **{**LORA, "train_iters": 2})
        state = json.loads((saves / "step_00000002" / "state.json").read_text())
        self.assertEqual(state["run"]["--base-quant"], "nf4")
        self.assert_train_fails(2, "--base-quant", init_from=base, load=saves / "step_00000002",
                                **{**LORA, "train_iters": 3})


if __name__ == "__main__":
    with np.errstate(invalid="ignore", divide="ignore"):
        unittest.main()
