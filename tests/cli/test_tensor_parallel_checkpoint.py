"""Weights and checkpoints under tensor parallelism, through the command line under mpirun: --save-weights at
T = 2 (and T = 2 x D = 2) writes one process's Hugging Face file (bit for bit from the same weights, within
Adam's rounding after the same training); --init-from at T = 2 follows one process from the same file; checkpoints resume across layouts (T = 2 -> T = 2 bitwise, T = 2 -> one
process, T = 2 x D = 2 -> D = 2, one process -> T = 2, within 1e-5 of the uninterrupted run), `memtrain export`
of a T = 2 checkpoint equals the run's --save-weights file (and `inspect` reads it), --verify-resume passes at
T = 2, and 8-bit moments' block scales are refused across a change of T by name.

Runs the binary memtrain_cli.py names.
"""
import unittest

from memtrain_cli import ResumeTestCase, memtrain, read_safetensors

N = ResumeTestCase.N  # steps before the save; runs are 2N steps
STEPS = 2 * N
BATCH = ["--global-batch-size", "4", "--no-shuffle"]


def tp(size):
    return ["--tensor-model-parallel-size", str(size)] if size > 1 else []


class TensorParallelCheckpoint(ResumeTestCase):
    def run_layout(self, out, tp_size, dp, *flags, iters=STEPS, model="gpt2-tiny"):
        return self.train(out, *tp(tp_size), *BATCH, "--model", model, *flags, ranks=tp_size * dp, iters=iters)


    def test_save_weights_equal_one_process(self):
        for model in ("gpt2-tiny", "llama-tiny"):
            for tp_size, dp, flags in ((2, 1, []), (2, 2, ["--zero-stage", "1"])):
                with self.subTest(model=model, tp=tp_size, dp=dp):
                    runs = {}
                    for name, lr in (("init", ["--lr", "0", "--min-lr", "0"]), ("trained", [])):
                        for size, ranks, layout in ((1, 1, []), (tp_size, dp, flags)):
                            out = self.tmp / f"{model}-{name}-tp{size}-dp{ranks}"
                            self.run_layout(out, size, ranks, "--save-weights", str(out / "w.safetensors"), *lr,
                                            *layout, model=model)
                            runs[name, size] = out
                    # Untrained, the ranks' parts of the initial weights make one process's file, bit for bit.
                    self.assertEqual((runs["init", tp_size] / "w.safetensors").read_bytes(),
                                     (runs["init", 1] / "w.safetensors").read_bytes())
                    # Trained, the losses agree within 1e-5; Adam's update, lr * m / sqrt(v), brings an element
                    # whose gradient is near zero the rounding of another summation order at the scale of the
                    # learning rate: up to 6e-4 of a tensor's largest weight.
                    self.assert_close(self.losses(runs["trained", tp_size]), self.losses(runs["trained", 1]))
                    self.assert_same_weights(runs["trained", tp_size] / "w.safetensors",
                                             runs["trained", 1] / "w.safetensors", 2e-3)

    def test_init_from_follows_one_process(self):
        for model in ("gpt2-tiny", "llama-tiny"):
            with self.subTest(model=model):
                source = self.tmp / f"{model}-source"
                weights = source / "w.safetensors"
                self.run_layout(source, 1, 1, "--save-weights", str(weights), "--seed", "5", iters=2, model=model)
                single, split = self.tmp / f"{model}-init-single", self.tmp / f"{model}-init-tp2"
                self.run_layout(single, 1, 1, "--init-from", str(weights), model=model)
                self.run_layout(split, 2, 1, "--init-from", str(weights), model=model)
                self.assert_close(self.losses(split), self.losses(single))
                # Loaded, not drawn: the first loss is the trained weights', below a fresh start's.
                self.assertLess(self.losses(single)[0], self.losses(source)[0])

    def test_resume_at_tp2_is_bitwise(self):
        self.assert_bitwise("tp2", [*tp(2), *BATCH], ranks=2)

    def test_resume_across_layouts(self):
        references = {}
        for model in ("gpt2-tiny", "llama-tiny"):
            references[model] = self.tmp / f"{model}-reference"
            self.run_layout(references[model], 1, 1, model=model)
        # (name, model, saved T, D, flags; resumed T, D, flags)
        zero1, zero3 = ["--zero-stage", "1"], ["--zero-stage", "3"]
        cases = (("tp2-to-1", "gpt2-tiny", 2, 1, [], 1, 1, []),
                 ("llama-tp2-to-1", "llama-tiny", 2, 1, [], 1, 1, []),
                 ("llama-1-to-tp2", "llama-tiny", 1, 1, [], 2, 1, []),
                 ("tp2dp2-to-dp2", "gpt2-tiny", 2, 2, zero1, 1, 2, []),
                 ("tp2dp2-zero3-to-1", "gpt2-tiny", 2, 2, zero3, 1, 1, []),
                 ("tp2dp2-to-tp2", "gpt2-tiny", 2, 2, [], 2, 1, []),
                 ("1-to-tp2", "gpt2-tiny", 1, 1, [], 2, 1, []),
                 ("dp2-to-tp2dp2", "gpt2-tiny", 1, 2, [], 2, 2, zero1))
        for name, model, saved_tp, saved_dp, saved_flags, tp_size, dp, flags in cases:
            with self.subTest(case=name):
                straight, split = self.uninterrupted_and_resumed(
                    name, [*tp(saved_tp), *BATCH, "--model", model, *saved_flags], saved_tp * saved_dp,
                    tp_size * dp, [*tp(tp_size), *BATCH, "--model", model, *flags])
                losses = self.losses(split)
                self.assertEqual(len(losses), STEPS)
                self.assertEqual(losses[:N], self.losses(straight)[:N])
                self.assert_close(losses[N:], self.losses(straight)[N:])
                self.assert_close(losses[N:], self.losses(references[model])[N:])

    def test_bf16_master_weights_resume_across_layouts(self):
        # The fp32 master copy and the moments map as the weights do.
        flags = [*BATCH, "--bf16"]
        straight, split = self.uninterrupted_and_resumed("bf16", [*tp(2), *flags], 2, 1, flags)
        self.assert_close(self.losses(split)[N:], self.losses(straight)[N:], 1e-2)

    def test_export_equals_save_weights(self):
        # The fp32 master copy, exported from the rank files of both tensor-parallel ranks.
        out = self.tmp / "export"
        self.train(out, *tp(2), *BATCH, "--bf16", "--save", str(out / "ckpt"), "--save-weights",
                   str(out / "w.safetensors"), ranks=2)
        inspected = memtrain("inspect", str(out / "ckpt"))
        self.assertEqual(inspected.returncode, 0, inspected.stderr)
        self.assertIn("checksums verified", inspected.stdout)
        self.assertIn("rank1.safetensors: flat parameters [0, ", inspected.stdout)  # its own numbering
        exported = self.tmp / "exported"
        result = memtrain("export", str(out / "ckpt"), "--out", str(exported))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(read_safetensors(exported / "model.safetensors"), read_safetensors(out / "w.safetensors"))

    def test_checkpoint_model_file_equals_one_process(self):
        single, split = self.tmp / "model-single", self.tmp / "model-tp2"
        self.run_layout(single, 1, 1, "--save", str(single / "ckpt"))
        self.run_layout(split, 2, 1, "--save", str(split / "ckpt"), "--save-weights", str(split / "w.safetensors"))
        final = f"ckpt/step_{STEPS:08d}/model.safetensors"
        self.assert_same_weights(split / final, single / final, 2e-3)
        self.assertEqual(read_safetensors(split / final), read_safetensors(split / "w.safetensors"))

    def test_verify_resume_at_tp2(self):
        result = self.train(self.tmp / "verify", *tp(2), *BATCH, "--verify-resume", str(N), ranks=2)
        self.assertIn(f"verify-resume: PASS: saved after step {N}", result.stdout)

    def test_8_bit_moments_refuse_a_change_of_tp(self):
        flags = [*BATCH, "--bf16", "--exp-avg-dtype", "int8", "--exp-avg-sq-dtype", "int8"]
        saved = self.tmp / "int8"
        self.train(saved, *tp(2), *flags, "--save", str(saved / "ckpt"), ranks=2, iters=N)
        result = self.train(self.tmp / "int8-resumed", *flags, "--load", str(saved / "ckpt"), expect=2)
        self.assertIn("--tensor-model-parallel-size 2", result.stderr)
        self.assertIn("8-bit moments", result.stderr)
        resumed = self.train(self.tmp / "int8-same", *tp(2), *flags, "--load", str(saved / "ckpt"), ranks=2)
        self.assertIn("resumed from", resumed.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
