"""LoRA's flags from the command line (issue 18): bad values and a --lora-* flag without --lora-rank are one-line
usage errors naming the flag; a run says what it trains (count and share) and trains only the adapters (frozen
weights in their own memory category, measured == planned); dropout's masks repeat under recompute; a resume
is bitwise; --save-adapter writes PEFT's layout with the trained values, and --init-adapter reads it back.

Runs the binary memtrain_cli.py names.
"""
import json
import unittest

from memtrain_cli import CliTestCase, memtrain, read_memory, read_metrics, read_safetensors

LORA = {"lora_rank": 4, "lora_alpha": 8}


class LoraFlags(CliTestCase):
    def test_bad_values_name_the_flag(self):
        for flags, mention in (({"lora_rank": 0}, "--lora-rank"), ({"lora_rank": -2}, "--lora-rank"),
                               ({"lora_rank": "x"}, "--lora-rank"),
                               ({**LORA, "lora_alpha": 0}, "--lora-alpha"),
                               ({**LORA, "lora_alpha": "nan"}, "--lora-alpha"),
                               ({**LORA, "lora_dropout": 1}, "--lora-dropout"),
                               ({**LORA, "lora_dropout": -0.1}, "--lora-dropout"),
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

    def test_weight_files_and_model_parallelism_are_refused(self):
        self.assert_train_fails(2, "--save-weights", save_weights=self.tmp / "w.safetensors", **LORA)
        for flag, mention in (("--tp", "--tensor-model-parallel-size 2"),
                              ("--pp", "--pipeline-model-parallel-size 2")):
            with self.subTest(flag=flag):
                self.assert_error(memtrain("estimate", "--model", "llama-tiny", "--lora-rank", "4", flag, "2"), 2,
                                  mention, "--lora-rank")


class LoraRun(CliTestCase):
    def test_trains_the_adapters_over_an_unchanged_base(self):
        # gpt2-tiny: 2 layers of c_attn [64 -> 192], c_proj [64 -> 64], c_fc [64 -> 256], mlp.c_proj [256 -> 64].
        per_layer = 4 * (64 + 192) + 4 * (64 + 64) + 4 * (64 + 256) + 4 * (256 + 64)
        weights = self.tmp / "base.safetensors"
        self.train(save_weights=weights, expect=0)  # a base to start from, written by a full run
        out, saves = self.tmp / "lora", self.tmp / "saves"
        result = self.train(init_from=weights, out=out, save=saves, train_iters=3, expect=0, **LORA)
        self.assertIn(f"trainable parameters {2 * per_layer:,} of", result.stdout)
        # The file holds the base only: the adapters start as PEFT's (A drawn, B zero) and train.
        adapters = read_safetensors(saves / "step_00000003" / "model.safetensors")
        self.assertTrue(any(b != 0 for b in adapters["h.0.attn.c_attn.lora_B.weight"][1]), "B has not trained")
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])
        self.assertEqual(memory["planned"]["params"], 2 * per_layer * 4)
        self.assertGreater(memory["planned"]["frozen"], 0)
        # Only the target modules: c_attn's adapter, the other linears and the norms frozen.
        attn = self.train(init_from=weights, out=self.tmp / "attn", lora_target="c_attn", lora_train_modules="ln_f",
                          expect=0, **LORA)
        self.assertIn(f"trainable parameters {2 * 4 * (64 + 192) + 2 * 64:,} of", attn.stdout)

    def test_resume_is_bitwise_and_repeats_the_base(self):
        # The checkpoint holds the adapters and their optimizer state; the frozen base comes back from the seed
        # or --init-from, which the checkpoint's settings record.
        for flags in ({}, {"bf16": True, "lora_dropout": 0.1}, {"model": "llama-tiny", "lora_train_modules": "norm"}):
            with self.subTest(flags=flags):
                result = self.train("--verify-resume", 2, out=self.tmp / "verify", train_iters=4, expect=0,
                                    **LORA, **flags)
                self.assertIn("verify-resume: PASS: saved after step 2", result.stdout)
        weights = self.tmp / "base.safetensors"
        self.train(save_weights=weights, expect=0)
        saves = self.tmp / "saves"
        self.train(init_from=weights, save=saves, out=self.tmp / "first", expect=0, **LORA)
        self.assertEqual(sorted(p.name for p in saves.glob("step_*")), ["step_00000002"])
        self.assert_train_fails(2, "--init-from", load=saves / "step_00000002", train_iters=3, **LORA)
        result = self.train(init_from=weights, load=saves / "step_00000002", train_iters=3, out=self.tmp / "again",
                            expect=0, **LORA)
        self.assertIn("resumed from", result.stdout)

    def test_dropout_masks_repeat_under_recompute_and_change_the_run(self):
        def losses(name, **flags):
            self.train(out=self.tmp / name, train_iters=4, expect=0, model="llama-tiny", **LORA, **flags)
            return [(r["loss"], r["grad_norm"]) for r in read_metrics(self.tmp / name)]
        dropped = losses("dropout", lora_dropout=0.2)
        self.assertEqual(losses("full", lora_dropout=0.2, recompute_granularity="full"), dropped)
        self.assertNotEqual(losses("none"), dropped)


class LoraAdapterFile(CliTestCase):
    def test_peft_layout_holds_the_trained_adapters(self):
        # (model, a module's PEFT key, its A and B shapes, the config's fan_in_fan_out and target_modules)
        for model, key, a_shape, b_shape, conv1d, targets in (
                ("gpt2-tiny", "base_model.model.transformer.h.1.attn.c_attn", [4, 64], [192, 4], True,
                 ["c_attn", "c_fc", "c_proj"]),
                ("llama-tiny", "base_model.model.model.layers.0.self_attn.k_proj", [4, 64], [32, 4], False,
                 ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"])):
            with self.subTest(model=model):
                adapter, saves = self.tmp / model / "adapter", self.tmp / model / "saves"
                self.train(model=model, save_adapter=adapter, save=saves, out=self.tmp / model / "run", expect=0,
                           **LORA)
                config = json.loads((adapter / "adapter_config.json").read_text())
                self.assertEqual({k: config[k] for k in ("peft_type", "task_type", "r", "lora_alpha", "bias",
                                                         "fan_in_fan_out", "target_modules")},
                                 {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
                                  "bias": "none", "fan_in_fan_out": conv1d, "target_modules": targets})
                tensors = read_safetensors(adapter / "adapter_model.safetensors")
                self.assertEqual(tensors[key + ".lora_A.weight"][0], a_shape)
                self.assertEqual(tensors[key + ".lora_B.weight"][0], b_shape)
                self.assertTrue(all(".lora_A.weight" in k or ".lora_B.weight" in k for k in tensors))
                # The same values as the final checkpoint's adapters, under our names there.
                ours = read_safetensors(saves / "step_00000002" / "model.safetensors")
                prefix = "base_model.model." + ("transformer." if model == "gpt2-tiny" else "")
                self.assertEqual({prefix + k: v for k, v in ours.items()}, tensors)
                self.assertTrue(any(b != 0 for b in tensors[key + ".lora_B.weight"][1]), "B has not trained")

    def test_init_adapter_reads_what_save_adapter_wrote(self):
        trained, again = self.tmp / "trained", self.tmp / "again"
        self.train(save_adapter=trained, out=self.tmp / "a", expect=0, **LORA)
        # lr 0 leaves the adapters as loaded (AdamW's step is lr times the update): they come out unchanged,
        # and the run starts from them, not from B = 0.
        self.train(lr=0, out=self.tmp / "b", expect=0, **LORA)
        self.train(lr=0, init_adapter=trained, save_adapter=again, out=self.tmp / "c", expect=0, **LORA)
        self.assertEqual(read_safetensors(again / "adapter_model.safetensors"),
                         read_safetensors(trained / "adapter_model.safetensors"))
        self.assertNotEqual(read_metrics(self.tmp / "b")[0]["loss"], read_metrics(self.tmp / "c")[0]["loss"])

    def test_init_adapter_must_match_the_run(self):
        trained = self.tmp / "trained"
        self.train(save_adapter=trained, out=self.tmp / "a", expect=0, **LORA)
        self.assert_train_fails(2, "--init-adapter", "--lora-rank", init_adapter=trained)
        self.assert_train_fails(1, "\"r\" is 4, expected 8 (--lora-rank)", init_adapter=trained, lora_rank=8)
        self.assert_train_fails(1, "\"lora_alpha\" is 8", init_adapter=trained, lora_rank=4, lora_alpha=16)
        # The config's target_modules names modules the run does not adapt: refused before the tensors are read.
        self.assert_train_fails(1, '"target_modules"', "--lora-target c_fc", init_adapter=trained, lora_rank=4,
                                lora_target="c_fc")
        self.assert_train_fails(1, "adapter_config.json", init_adapter=self.tmp / "nowhere", **LORA)

    def test_needs_lora_and_no_full_modules(self):
        self.assert_train_fails(2, "--save-adapter", "--lora-rank", save_adapter=self.tmp / "a")
        self.assert_train_fails(2, "--save-adapter", "--lora-train-modules", save_adapter=self.tmp / "a",
                                lora_train_modules="ln_f", **LORA)


if __name__ == "__main__":
    unittest.main()
