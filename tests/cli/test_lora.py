"""LoRA's flags from the command line (issue 18): bad values and a --lora-* flag without --lora-rank are one-line
usage errors naming the flag; a run says what it trains (count and share), trains only the adapters (frozen
weights in their own memory category, measured == planned) and leaves the base as it found it.

Runs the binary memtrain_cli.py names.
"""
import unittest

from memtrain_cli import CliTestCase, read_memory

LORA = {"lora_rank": 4, "lora_alpha": 8}


class LoraFlags(CliTestCase):
    def test_bad_values_name_the_flag(self):
        for flags, mention in (({"lora_rank": 0}, "--lora-rank"), ({"lora_rank": -2}, "--lora-rank"),
                               ({"lora_rank": "x"}, "--lora-rank"),
                               ({**LORA, "lora_alpha": 0}, "--lora-alpha"),
                               ({**LORA, "lora_alpha": "nan"}, "--lora-alpha"),
                               ({**LORA, "lora_dropout": 0.1}, "--lora-dropout"),
                               ({**LORA, "lora_target": "q_proj"}, "--lora-target"),
                               ({**LORA, "lora_target": ","}, "--lora-target"),
                               ({**LORA, "lora_train_modules": "nonsense"}, "--lora-train-modules")):
            with self.subTest(flags=flags):
                self.assert_train_fails(2, mention, **flags)

    def test_lora_flags_need_a_rank(self):
        for flag, value in (("lora_alpha", 16), ("lora_dropout", 0), ("lora_target", "c_attn"),
                            ("lora_train_modules", "ln_f")):
            with self.subTest(flag=flag):
                self.assert_train_fails(2, "--" + flag.replace("_", "-"), "--lora-rank", **{flag: value})

    def test_checkpoints_and_weight_files_are_refused_until_they_hold_adapters(self):
        self.assert_train_fails(2, "--save", "--lora-rank", save=self.tmp / "saves", **LORA)
        self.assert_train_fails(2, "--save-weights", save_weights=self.tmp / "w.safetensors", **LORA)


class LoraRun(CliTestCase):
    def test_trains_the_adapters_over_an_unchanged_base(self):
        # gpt2-tiny: 2 layers of c_attn [64 -> 192], c_proj [64 -> 64], c_fc [64 -> 256], mlp.c_proj [256 -> 64].
        per_layer = 4 * (64 + 192) + 4 * (64 + 64) + 4 * (64 + 256) + 4 * (256 + 64)
        weights = self.tmp / "base.safetensors"
        self.train(save_weights=weights, expect=0)  # a base to start from, written by a full run
        out = self.tmp / "lora"
        result = self.train(init_from=weights, out=out, train_iters=3, expect=0, **LORA)
        self.assertIn(f"trainable parameters {2 * per_layer:,} of", result.stdout)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])
        self.assertEqual(memory["planned"]["params"], 2 * per_layer * 4)
        self.assertGreater(memory["planned"]["frozen"], 0)
        # Only the target modules: c_attn's adapter, the other linears and the norms frozen.
        attn = self.train(init_from=weights, out=self.tmp / "attn", lora_target="c_attn", lora_train_modules="ln_f",
                          expect=0, **LORA)
        self.assertIn(f"trainable parameters {2 * 4 * (64 + 192) + 2 * 64:,} of", attn.stdout)


if __name__ == "__main__":
    unittest.main()
