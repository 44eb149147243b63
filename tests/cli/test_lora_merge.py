"""`memtrain export CKPT --merge-adapter` (issue 18) against PEFT's merge written here in plain torch: a tiny GPT-2
(Conv1D weights, fan_in_fan_out) and a tiny LLaMA (GQA; q/k/v and gate/up fused in memtrain, one adapter per
Hugging Face module) train LoRA on every linear module, and the merged export holds base + (alpha / r) B A (alpha /
sqrt(r) with --lora-rslora, PEFT's use_rslora) for each
adapted module (the base from the seed, a file or shards; the adapters and trained modules from the checkpoint),
to fp32 rounding; the merged model's logits are those of the base with its adapters kept apart; it loads back with
--init-from and trains. A checkpoint names its base by checksum: a changed or missing base is a data error on
resume and on export, an older checkpoint without checksums still loads. Without --merge-adapter a LoRA checkpoint
is a usage error, and so is --merge-adapter on a full checkpoint (a flag that would do nothing).

Uses torch (python3-torch) and the references of tests/parity.
"""
import json
import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "parity"))
import test_gpt2_parity as gpt2  # noqa: E402
import test_llama_parity as llama  # noqa: E402
from parity_common import read_safetensors, rel, write_safetensors  # noqa: E402

from memtrain_cli import CliTestCase, crc32c, memtrain  # noqa: E402

RANK, ALPHA = 4, 8.0
LORA = {"lora_rank": RANK, "lora_alpha": ALPHA, "lora_target": "all-linear"}
FAMILIES = {"gpt2-tiny": (gpt2.forward, True), "llama-tiny": (llama.forward, False)}  # forward, Conv1D weights


def read_weights(path: Path) -> dict:
    """A safetensors file, or every shard an index (or a folder holding one) lists."""
    if path.is_dir():
        path = path / "model.safetensors.index.json" if (path / "model.safetensors.index.json").exists() \
            else path / "model.safetensors"
    if path.suffix != ".json":
        return read_safetensors(path)
    shards = set(json.loads(path.read_text())["weight_map"].values())
    return {k: v for shard in sorted(shards) for k, v in read_safetensors(path.parent / shard).items()}


def peft_merge(base: dict, trained: dict, conv1d: bool, scaling=ALPHA / RANK) -> dict:
    """PEFT's merge_and_unload: every module with lora_A/lora_B gets W + scaling B A (its transpose for
    fan_in_fan_out; scaling alpha / r, or alpha / sqrt(r) with use_rslora); tensors the checkpoint trained in full
    replace the base's."""
    merged = {name: trained.get(name, t) for name, t in base.items()}
    for name, a in trained.items():
        if name.endswith(".lora_A.weight"):
            module = name[: -len(".lora_A.weight")]
            delta = (trained[module + ".lora_B.weight"] @ a) * scaling
            merged[module + ".weight"] = merged[module + ".weight"] + (delta.t() if conv1d else delta)
    return merged


class Adapted:
    """A module weight with its adapter kept apart, as PEFT's unmerged forward applies it: x W (Conv1D) or x W^T,
    plus (alpha / r) x A^T B^T. The references multiply by `weight` or `weight.t()`."""

    def __init__(self, weight, a, b, scaling, transposed=False):
        self.weight, self.a, self.b, self.scaling, self.transposed = weight, a, b, scaling, transposed

    def t(self):
        return Adapted(self.weight, self.a, self.b, self.scaling, not self.transposed)

    def __rmatmul__(self, x):
        base = x @ (self.weight.t() if self.transposed else self.weight)
        return base + self.scaling * (x @ self.a.t()) @ self.b.t()


def unmerged(base: dict, trained: dict, scaling) -> dict:
    params = {name: trained.get(name, t) for name, t in base.items()}
    for name, a in trained.items():
        if name.endswith(".lora_A.weight"):
            module = name[: -len(".lora_A.weight")]
            params[module + ".weight"] = Adapted(params[module + ".weight"], a, trained[module + ".lora_B.weight"],
                                                 scaling)
    return params


def shard(weights: Path, folder: Path):
    """The tensors of `weights` as two shards and Hugging Face's index in `folder`."""
    tensors = read_safetensors(weights)
    names = list(tensors)
    folder.mkdir()
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:]), start=1):
        file = f"model-{i:05d}-of-00002.safetensors"
        write_safetensors(folder / file, {n: tensors[n] for n in part})
        weight_map.update({n: file for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


class MergedExport(CliTestCase):
    def lora_checkpoint(self, model, base=None, **flags):
        """A LoRA run of 3 steps over `base` (None: the seed's) saved into self.tmp / model / "saves"; its
        checkpoint directory."""
        saves = self.tmp / model / "saves"
        self.train(model=model, init_from=base, save=saves, out=self.tmp / model / "run", train_iters=3, expect=0,
                   **LORA, **flags)
        return saves / "step_00000003"

    def export(self, checkpoint, out, *extra):
        return memtrain("export", checkpoint, "--out", out, *extra)

    def check_merge(self, model, base_weights, checkpoint, merged_dir, scaling=ALPHA / RANK):
        forward, conv1d = FAMILIES[model]
        base, merged = read_weights(base_weights), read_weights(merged_dir)
        trained = read_safetensors(checkpoint / "model.safetensors")
        self.assertEqual(set(merged), set(base))
        expected = peft_merge(base, trained, conv1d, scaling)
        adapted = {n[: -len(".lora_A.weight")] + ".weight" for n in trained if n.endswith(".lora_A.weight")}
        for name, want in expected.items():
            with self.subTest(model=model, tensor=name):
                torch.testing.assert_close(merged[name], want, rtol=1e-6, atol=1e-7)
                if name in adapted:  # the adapters trained: the merge changed the weight
                    self.assertGreater((merged[name] - base[name]).abs().max().item(), 1e-5)
        config = json.loads((merged_dir / "config.json").read_text())
        tokens = torch.randint(0, config["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            logits = forward(merged, config, tokens)
            reference = forward(unmerged(base, trained, scaling), config, tokens)
        self.assertLess(rel(logits, reference), 1e-5, model)
        return len(adapted)

    def test_gpt2_from_the_seed(self):
        # lr 0 leaves a full run's weights at the seed's initial values: the base a seeded LoRA run freezes.
        seed_base = self.tmp / "seed.safetensors"
        self.train(lr=0, save_weights=seed_base, expect=0)
        adapter = self.tmp / "adapter"
        checkpoint = self.lora_checkpoint("gpt2-tiny", save_adapter=adapter)
        merged = self.tmp / "merged"
        result = self.export(checkpoint, merged, "--merge-adapter")
        self.assertEqual(result.returncode, 0, result.stderr)
        # c_attn (one adapter on the fused q/k/v), attn.c_proj, c_fc, mlp.c_proj in 2 layers.
        self.assertEqual(self.check_merge("gpt2-tiny", seed_base, checkpoint, merged), 8)
        # PEFT's merge of the adapter file it wrote (PEFT's keys, fan_in_fan_out) gives the same model.
        prefix = "base_model.model.transformer."
        peft = {k[len(prefix):]: v for k, v in read_safetensors(adapter / "adapter_model.safetensors").items()}
        self.assertTrue(json.loads((adapter / "adapter_config.json").read_text())["fan_in_fan_out"])
        exported = read_weights(merged)
        for name, want in peft_merge(read_weights(seed_base), peft, conv1d=True).items():
            torch.testing.assert_close(exported[name], want, rtol=1e-6, atol=1e-7)
        self.train(init_from=merged, out=self.tmp / "again", expect=0)

    def test_rslora_scales_by_alpha_over_the_root_of_the_rank(self):
        # PEFT's use_rslora: alpha / sqrt(r) in training and in the merge; the adapter file says so.
        seed_base = self.tmp / "seed.safetensors"
        self.train(lr=0, save_weights=seed_base, expect=0)
        adapter = self.tmp / "adapter"
        checkpoint = self.lora_checkpoint("gpt2-tiny", save_adapter=adapter, lora_rslora=True)
        merged = self.tmp / "merged"
        result = self.export(checkpoint, merged, "--merge-adapter")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_merge("gpt2-tiny", seed_base, checkpoint, merged, scaling=ALPHA / RANK ** 0.5)
        self.assertIs(json.loads((adapter / "adapter_config.json").read_text())["use_rslora"], True)
        # The adapter it wrote loads back into an rslora run only.
        self.train(init_adapter=adapter, lora_rslora=True, out=self.tmp / "again", expect=0, **LORA)
        refused = self.train(init_adapter=adapter, out=self.tmp / "plain", expect=1, **LORA)
        self.assertIn('"use_rslora" is true, expected false or absent (no --lora-rslora)', refused.stderr)

    def test_llama_from_shards_with_a_trained_module(self):
        weights = self.tmp / "base.safetensors"
        self.train(model="llama-tiny", save_weights=weights, expect=0)
        base = self.tmp / "sharded"
        shard(weights, base)
        checkpoint = self.lora_checkpoint("llama-tiny", base / "model.safetensors.index.json",
                                          lora_train_modules="model.norm")
        merged = self.tmp / "merged"
        result = self.export(checkpoint, merged, "--merge-adapter")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(p.name for p in merged.iterdir()),
                         ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json"])
        # q, k, v (fused in memtrain), o, gate, up (fused), down in 2 layers.
        self.assertEqual(self.check_merge("llama-tiny", base, checkpoint, merged), 14)
        self.assertFalse(torch.equal(read_weights(merged)["model.norm.weight"],
                                     read_weights(base)["model.norm.weight"]), "model.norm did not train")
        self.train(model="llama-tiny", init_from=merged, out=self.tmp / "again", expect=0, **LORA)


class BaseChecksum(CliTestCase):
    def setUp(self):
        super().setUp()
        self.base = self.tmp / "base.safetensors"
        self.train(save_weights=self.base, out=self.tmp / "full", expect=0)
        self.saves = self.tmp / "saves"
        self.train(init_from=self.base, save=self.saves, out=self.tmp / "lora", expect=0, **LORA)
        self.checkpoint = self.saves / "step_00000002"
        self.recorded = json.loads((self.checkpoint / "state.json").read_text())["base"]["files"]

    def resume(self, **flags):
        return self.train(init_from=self.base, load=self.checkpoint, train_iters=3, out=self.tmp / "resumed",
                          **LORA, **flags)

    def test_names_the_base_by_path_and_checksum(self):
        blob = self.base.read_bytes()
        self.assertEqual(self.recorded, [{"path": str(self.base), "bytes": len(blob),
                                          "crc32c": f"{crc32c(blob):08x}"}])
        self.assertIn("resumed from", self.resume(expect=0).stdout)
        self.assertIn(f"LoRA base file {self.base}: {len(blob)} bytes, crc32c {crc32c(blob):08x}",
                      memtrain("inspect", self.checkpoint).stdout)

    def test_a_changed_base_is_refused_on_resume_and_export(self):
        blob = bytearray(self.base.read_bytes())
        blob[-4] ^= 0x01  # the lowest mantissa bit of the last weight (little-endian fp32)
        self.base.write_bytes(bytes(blob))
        now = f"{crc32c(bytes(blob)):08x}"
        for result in (self.resume(), memtrain("export", self.checkpoint, "--merge-adapter", "--out",
                                               self.tmp / "merged")):
            self.assert_error(result, 1, self.base, now, self.recorded[0]["crc32c"], "changed after training")
        self.assertFalse((self.tmp / "merged").exists())

    def test_a_missing_base_names_its_path(self):
        self.base.rename(self.tmp / "moved.safetensors")
        self.assert_error(self.resume(), 1, self.base)
        self.assert_error(memtrain("export", self.checkpoint, "--merge-adapter", "--out", self.tmp / "merged"), 1,
                          self.base, "missing")

    def test_a_checkpoint_without_checksums_still_loads(self):
        # As saved before checkpoints named their base: state.json without "base", its manifest entry updated.
        state = json.loads((self.checkpoint / "state.json").read_text())
        del state["base"]
        text = json.dumps(state, indent=2).encode()
        (self.checkpoint / "state.json").write_bytes(text)
        manifest = json.loads((self.checkpoint / "manifest.json").read_text())
        for entry in manifest["files"]:
            if entry["name"] == "state.json":
                entry.update(bytes=len(text), crc32c=f"{crc32c(text):08x}")
        (self.checkpoint / "manifest.json").write_text(json.dumps(manifest, indent=2))
        self.assertIn("unverified", self.resume(expect=0).stdout)
        result = memtrain("export", self.checkpoint, "--merge-adapter", "--out", self.tmp / "merged")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("unverified", result.stdout)


class ExportFlags(CliTestCase):
    def test_lora_needs_merge_adapter_and_a_full_checkpoint_refuses_it(self):
        self.train(save=self.tmp / "lora", expect=0, **LORA)
        self.assert_error(memtrain("export", self.tmp / "lora", "--out", self.tmp / "a"), 2, "LoRA checkpoint",
                          "--merge-adapter")
        self.train(save=self.tmp / "full", out=self.tmp / "full-run", expect=0)
        self.assert_error(memtrain("export", self.tmp / "full", "--merge-adapter", "--out", self.tmp / "b"), 2,
                          "--merge-adapter", "not a LoRA checkpoint")
        self.assertFalse((self.tmp / "a").exists() or (self.tmp / "b").exists())
        self.assertEqual(memtrain("export", self.tmp / "full", "--out", self.tmp / "c").returncode, 0)
        self.assertTrue((self.tmp / "c" / "model.safetensors").exists())


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main()
