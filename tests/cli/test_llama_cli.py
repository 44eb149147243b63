"""End-to-end tests of the LLaMA family on the command line: llama-tiny (2 layers, 4 query heads on 2 KV heads,
C=64, untied head, vocabulary 256) trains on byte tokens with measured == planned memory in every precision and
recompute mode; its weights round-trip through Hugging Face safetensors, single-file and sharded with
model.safetensors.index.json, including shards written here by hand with torch; checkpoints resume bitwise and
export Hugging Face files; a Hugging Face config.json selects the architecture; bad LLaMA shapes are one-line
usage errors.

Runs the binary memtrain_cli.py names.
"""

import json
import math
import unittest
from pathlib import Path

import torch

from memtrain_cli import (CliTestCase, memtrain, read_json, read_memory, read_metrics, read_safetensors,
                          write_safetensors)

LLAMA_TINY_CONFIG = {  # llama-tiny as a Hugging Face config.json
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 128,
    "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
}


def hf_llama_tensors(gen) -> dict:
    """llama-tiny's Hugging Face tensors (q/k/v and gate/up separate, nn.Linear layout), random."""
    C, I, KV, V = 64, 176, 32, 256
    t = {"model.embed_tokens.weight": [V, C]}
    for l in range(2):
        h = f"model.layers.{l}."
        t.update({h + "input_layernorm.weight": [C], h + "self_attn.q_proj.weight": [C, C],
                  h + "self_attn.k_proj.weight": [KV, C], h + "self_attn.v_proj.weight": [KV, C],
                  h + "self_attn.o_proj.weight": [C, C], h + "post_attention_layernorm.weight": [C],
                  h + "mlp.gate_proj.weight": [I, C], h + "mlp.up_proj.weight": [I, C],
                  h + "mlp.down_proj.weight": [C, I]})
    t.update({"model.norm.weight": [C], "lm_head.weight": [V, C]})
    return {name: 0.05 * torch.randn(shape, generator=gen) for name, shape in t.items()}


def write_shards(folder: Path, tensors: dict, shards: int):
    """tensors split into `shards` safetensors files (F32, header by hand) and their index, as HF writes them."""
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        write_safetensors(folder / file,
                              {n: (list(tensors[n].shape), tensors[n].numpy().tobytes()) for n in part})
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * 4 for t in tensors.values())
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))


class LlamaRuns(CliTestCase):
    def train(self, *words, **flags):
        return super().train(*words, **{"model": "llama-tiny", **flags})

    def test_trains_with_measured_equal_to_planned_in_every_mode(self):
        modes = {"fp32": {}, "bf16": {"bf16": True}, "bf16 O2": {"bf16": True, "o2_optimizer": True},
                 "selective": {"recompute_granularity": "selective"}, "full": {"recompute_granularity": "full"}}
        for name, flags in modes.items():
            with self.subTest(name):
                out = self.tmp / name.replace(" ", "_")
                result = self.train(out=out, train_iters=6, eval_interval=3, eval_iters=1, lr=3e-3, **flags)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("model llama-tiny: 125,248 parameters", result.stdout)
                records = read_metrics(out)
                self.assertTrue(all(math.isfinite(r["loss"]) for r in records), records)
                self.assertLess(records[-1]["loss"], records[0]["loss"], records)
                memory = read_memory(out)
                self.assertEqual(memory["planned"], memory["measured"])

    def test_recompute_repeats_the_loss_curve_bitwise(self):
        losses = []
        for name, flags in {"none": {}, "full": {"recompute_granularity": "full"}}.items():
            result = self.train(out=self.tmp / name, train_iters=3, **flags)
            self.assertEqual(result.returncode, 0, result.stderr)
            losses.append([r["loss"] for r in read_metrics(self.tmp / name)])
        self.assertEqual(losses[0], losses[1])

    def test_hf_config_json_selects_llama(self):
        config = self.tmp / "config.json"
        config.write_text(json.dumps(LLAMA_TINY_CONFIG))
        by_config = self.train(model=config, out=self.tmp / "config", train_iters=2)
        self.assertEqual(by_config.returncode, 0, by_config.stderr)
        by_preset = self.train(out=self.tmp / "preset", train_iters=2)
        self.assertEqual(by_preset.returncode, 0, by_preset.stderr)
        self.assertEqual(read_metrics(self.tmp / "config"), [
            {**r, "step_ms": m["step_ms"], "tokens_per_sec": m["tokens_per_sec"]}
            for r, m in zip(read_metrics(self.tmp / "preset"), read_metrics(self.tmp / "config"))])

    def test_bad_llama_shapes_are_usage_errors(self):
        config = self.tmp / "config.json"
        config.write_text(json.dumps({**LLAMA_TINY_CONFIG, "num_key_value_heads": 3}))
        self.assert_train_fails(2, config, "num_key_value_heads", model=config)
        config.write_text(json.dumps({**LLAMA_TINY_CONFIG, "hidden_act": "gelu"}))
        self.assert_train_fails(2, config, "hidden_act", model=config)

    def test_hand_written_shards_load_and_save_back_exactly(self):
        """Shards written here by hand load (by index or by folder); at --lr 0 the weights saved at the end, one
        file or sharded again, are the loaded ones, bit for bit, under the same Hugging Face names."""
        tensors = hf_llama_tensors(torch.Generator().manual_seed(7))
        hf = self.tmp / "hf"
        hf.mkdir()
        write_shards(hf, tensors, 3)
        single = self.tmp / "saved.safetensors"
        result = self.train(init_from=hf / "model.safetensors.index.json", lr=0, save_weights=single)
        self.assertEqual(result.returncode, 0, result.stderr)
        saved = read_safetensors(single)
        self.assertEqual(set(saved), set(tensors))
        for name, t in tensors.items():
            self.assertEqual(saved[name], (list(t.shape), t.numpy().tobytes()), name)

        resharded = self.tmp / "resharded"
        resharded.mkdir()
        result = self.train(init_from=hf, lr=0, save_weights=resharded / "model.safetensors.index.json")
        self.assertEqual(result.returncode, 0, result.stderr)
        index = read_json(resharded / "model.safetensors.index.json")
        self.assertEqual(set(index["weight_map"]), set(tensors))
        self.assertEqual(index["metadata"]["total_size"], sum(t.numel() * 4 for t in tensors.values()))
        for name, t in tensors.items():
            shard = read_safetensors(resharded / index["weight_map"][name])
            self.assertEqual(shard[name], (list(t.shape), t.numpy().tobytes()), name)

    def test_checkpoint_resumes_bitwise_and_exports_hugging_face_files(self):
        """A run stopped after step 3 and resumed from its checkpoint logs the uninterrupted run's losses; the
        exported model.safetensors and config.json start a new run with the same weights (LLaMA names)."""
        common = {"train_iters": 6, "bf16": True}
        whole = self.train(out=self.tmp / "whole", **common)
        self.assertEqual(whole.returncode, 0, whole.stderr)
        run, save = self.tmp / "run", self.tmp / "run" / "save"
        first = self.train(out=run, save=save, save_interval=3, exit_interval=3, **common)
        self.assertEqual(first.returncode, 0, first.stderr)
        resumed = self.train(out=run, save=save, save_interval=3, resume="auto", **common)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertEqual([r["loss"] for r in read_metrics(run)],
                         [r["loss"] for r in read_metrics(self.tmp / "whole")])

        exported = self.tmp / "hf"
        result = memtrain("export", save, "--out", exported)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(read_json(exported / "config.json")["num_key_value_heads"], 2)
        self.assertIn("model.layers.1.mlp.up_proj.weight", read_safetensors(exported / "model.safetensors"))
        saved = self.tmp / "saved.safetensors"
        again = self.train(model=exported / "config.json", init_from=exported, lr=0, save_weights=saved,
                           out=self.tmp / "again")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(read_safetensors(saved), read_safetensors(exported / "model.safetensors"))

    def test_missing_shard_tensor_names_it(self):
        tensors = hf_llama_tensors(torch.Generator().manual_seed(7))
        del tensors["model.layers.1.self_attn.k_proj.weight"]
        write_shards(self.tmp, tensors, 2)
        index = self.tmp / "model.safetensors.index.json"
        self.assert_train_fails(1, "model.layers.1.self_attn.k_proj.weight", init_from=index)


if __name__ == "__main__":
    unittest.main(verbosity=2)
