"""Weights and checkpoints under pipeline parallelism, through the command line under mpirun (both tiny presets
have 2 layers, so P = 2): checkpoints resume across layouts (T = 2 x P = 2 -> one process and -> T = 2 x D = 2,
one process -> P = 2, P = 2 x D = 2 at ZeRO-1 -> one process, within 1e-5 of the uninterrupted run) and at P = 2
bitwise; --save-weights at P = 2 writes one process's Hugging Face file (bit for bit untrained, within Adam's
rounding trained); --init-from at P = 2 follows one process; `memtrain export` of a P = 2 checkpoint equals that
of the same state resharded onto one process (and `inspect` reads it); --verify-resume passes at P = 2.

Runs the binary memtrain_cli.py names.
"""
import math
import unittest

from memtrain_cli import ResumeTestCase, memtrain, read_safetensors

N = ResumeTestCase.N  # steps before the save; runs are 2N steps
STEPS = 2 * N
BATCH = ["--global-batch-size", "4", "--no-shuffle"]
ZERO1 = ["--zero-stage", "1"]


def layout(tp=1, pp=1):
    return [*(["--tensor-model-parallel-size", str(tp)] if tp > 1 else []),
            *(["--pipeline-model-parallel-size", str(pp)] if pp > 1 else [])]


class PipelineParallelCheckpoint(ResumeTestCase):
    def test_resume_across_layouts(self):
        # (name, model, saved T, P, D, flags; resumed T, P, D, flags)
        cases = (("tp2pp2-to-1", "gpt2-tiny", (2, 2, 1), [], (1, 1, 1), []),
                 ("tp2pp2-to-tp2dp2", "gpt2-tiny", (2, 2, 1), [], (2, 1, 2), ZERO1),
                 ("1-to-pp2", "gpt2-tiny", (1, 1, 1), [], (1, 2, 1), []),
                 ("pp2dp2-zero1-to-1", "gpt2-tiny", (1, 2, 2), ZERO1, (1, 1, 1), []),
                 ("llama-tp2pp2-to-1", "llama-tiny", (2, 2, 1), [], (1, 1, 1), []),
                 ("llama-1-to-pp2", "llama-tiny", (1, 1, 1), [], (1, 2, 1), []))
        references = {}
        for name, model, saved, saved_flags, resumed, flags in cases:
            with self.subTest(case=name):
                if model not in references:
                    references[model] = self.tmp / f"{model}-reference"
                    self.train(references[model], *BATCH, "--model", model)
                straight, split = self.uninterrupted_and_resumed(
                    name, [*layout(*saved[:2]), *BATCH, "--model", model, *saved_flags], math.prod(saved),
                    math.prod(resumed), [*layout(*resumed[:2]), *BATCH, "--model", model, *flags])
                losses = self.losses(split)
                self.assertEqual(len(losses), STEPS)
                self.assertEqual(losses[:N], self.losses(straight)[:N])
                self.assert_close(losses[N:], self.losses(straight)[N:])
                self.assert_close(losses[N:], self.losses(references[model])[N:])

    def test_resume_at_pp2_is_bitwise(self):
        # gpt2-tiny's tied head: the last stage's copy of the embedding, its moments included, comes back too.
        self.assert_bitwise("pp2", [*layout(pp=2), *BATCH], ranks=2)

    def test_save_weights_equal_one_process(self):
        for model in ("gpt2-tiny", "llama-tiny"):
            with self.subTest(model=model):
                runs = {}
                for name, lr in (("init", ["--lr", "0", "--min-lr", "0"]), ("trained", [])):
                    for pp in (1, 2):
                        out = self.tmp / f"{model}-{name}-pp{pp}"
                        self.train(out, *layout(pp=pp), *BATCH, "--model", model, "--save-weights",
                                   str(out / "w.safetensors"), *lr, ranks=pp, iters=2)
                        runs[name, pp] = out / "w.safetensors"
                # Untrained, the stages' tensors make one process's file, bit for bit: each written once.
                self.assertEqual(runs["init", 2].read_bytes(), runs["init", 1].read_bytes())
                # Trained, within the tolerance of another summation order (test_tensor_parallel_checkpoint.py).
                self.assert_same_weights(runs["trained", 2], runs["trained", 1], 2e-3)

    def test_init_from_follows_one_process(self):
        for model in ("gpt2-tiny", "llama-tiny"):
            with self.subTest(model=model):
                source = self.tmp / f"{model}-source"
                weights = source / "w.safetensors"
                self.train(source, *BATCH, "--model", model, "--save-weights", str(weights), "--seed", "5",
                           iters=2)
                single, split = self.tmp / f"{model}-init-single", self.tmp / f"{model}-init-pp2"
                self.train(single, *BATCH, "--model", model, "--init-from", str(weights), iters=2)
                self.train(split, *layout(pp=2), *BATCH, "--model", model, "--init-from", str(weights), ranks=2,
                           iters=2)
                self.assert_close(self.losses(split), self.losses(single))
                # Loaded, not drawn: the first loss is the trained weights', below a fresh start's.
                self.assertLess(self.losses(single)[0], self.losses(source)[0])

    def test_export_equals_one_process_export(self):
        # The fp32 master copy of a T = 2 x P = 2 checkpoint, and the same state resharded onto one process
        # (loaded at its last step into a --save that lacks it).
        out, single = self.tmp / "export", self.tmp / "resharded"
        self.train(out, *layout(2, 2), *BATCH, "--bf16", "--save", str(out / "ckpt"), "--save-weights",
                   str(out / "w.safetensors"), ranks=4, iters=2)
        self.train(single, *BATCH, "--bf16", "--load", str(out / "ckpt"), "--save", str(single / "ckpt"), iters=2)
        inspected = memtrain("inspect", str(out / "ckpt"))
        self.assertEqual(inspected.returncode, 0, inspected.stderr)
        self.assertIn("checksums verified", inspected.stdout)
        self.assertIn("rank3.safetensors: flat parameters [0, ", inspected.stdout)  # stage 1's own numbering
        self.assertIn("stage 1", inspected.stdout)
        exports = {}
        for name, checkpoint in (("pp2", out / "ckpt"), ("single", single / "ckpt")):
            exports[name] = self.tmp / f"exported-{name}" / "model.safetensors"
            result = memtrain("export", str(checkpoint), "--out", str(exports[name].parent))
            self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(exports["pp2"].read_bytes(), exports["single"].read_bytes())
        self.assertEqual(read_safetensors(exports["pp2"]), read_safetensors(out / "w.safetensors"))
        # The checkpoints' model files: the same whole weights, in their bf16.
        final = "ckpt/step_00000002/model.safetensors"
        self.assertEqual((out / final).read_bytes(), (single / final).read_bytes())

    def test_verify_resume_at_pp2(self):
        result = self.train(self.tmp / "verify", *layout(pp=2), *BATCH, "--verify-resume", str(N), ranks=2)
        self.assertIn(f"verify-resume: PASS: saved after step {N}", result.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
