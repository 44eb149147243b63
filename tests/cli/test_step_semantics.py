"""A step means the same thing however it is split (issue 31, items 1, 2 and 7): on instruction data with a loss
mask, micro-batch b x accumulation k x data-parallel d is one micro-batch of b*k*d within 1e-6 (fp32; LoRA's
dropout masks included), the logged
loss one mean over the step's counted targets; which samples a step reads depends on the global batch only, so a
resume may change the micro-batch size, accumulation and the data-parallel size as long as the global batch
stays (a changed one is refused by name); a resume that extends --train-iters keeps its learning-rate schedule
only with --lr-decay-iters (refused by name otherwise), and a resume on other data is refused by name.

Runs the binary memtrain_cli.py names; the data-parallel cases run under mpirun (label mpi) with -k Parallel.
"""
import json
import unittest
from pathlib import Path

from memtrain_cli import ResumeTestCase, crc32c, memtrain, read_metrics
from test_instruction_data import prepare_records

# fp32 on masked records: the same step split differently sums in another order only.
TOLERANCE = 1e-6
STEPS = 4
# Micro-batch size and accumulation steps, one process: each a global batch of 4.
SPLITS = [(4, 1), (2, 2), (1, 4)]


def rewrite_state(checkpoint: Path, change):
    """Applies `change` to a checkpoint's state.json and records the file's new size and checksum."""
    state = json.loads((checkpoint / "state.json").read_text())
    change(state)
    text = json.dumps(state).encode()
    (checkpoint / "state.json").write_bytes(text)
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["name"] == "state.json":
            entry["bytes"], entry["crc32c"] = len(text), f"{crc32c(text):08x}"
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


class SplitCase(ResumeTestCase):
    """Masked instruction records, and runs of one step split in different ways."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _, cls.data, _ = prepare_records(cls.class_tmp.name, "sft")

    def run_split(self, name, micro_batch, accumulation, *flags, ranks=1):
        out = self.tmp / name
        self.train(out, "--micro-batch-size", micro_batch, "--grad-accum-steps", accumulation, *flags, ranks=ranks,
                   iters=STEPS)
        return [(r["loss"], r["grad_norm"]) for r in read_metrics(out)]

    def assert_same_steps(self, got, want, what):
        self.assertEqual(len(got), STEPS, what)
        for step, ((loss, norm), (want_loss, want_norm)) in enumerate(zip(got, want), 1):
            self.assertAlmostEqual(loss, want_loss, delta=TOLERANCE * abs(want_loss), msg=f"{what}: step {step} loss")
            self.assertAlmostEqual(norm, want_norm, delta=TOLERANCE * abs(want_norm), msg=f"{what}: step {step} norm")

    def assert_splits_agree(self, *flags):
        whole = self.run_split("whole", *SPLITS[0], *flags)
        for b, k in SPLITS[1:]:
            self.assert_same_steps(self.run_split(f"b{b}k{k}", b, k, *flags), whole, f"{b} x {k} {flags}")
        return whole


class StepSplits(SplitCase):
    def test_one_mean_per_step_in_order(self):
        self.assert_splits_agree("--no-shuffle", "--log-interval", "1")

    def test_one_mean_per_step_shuffled(self):
        self.assert_splits_agree("--log-interval", "1")

    def test_packed_records_split_the_same(self):
        # Several records a sequence, their positions restarting: the split changes nothing either.
        _, packed, _ = prepare_records(self.class_tmp.name, "packed64", "--pack", "--seq-length", 64)
        flags = ["--log-interval", "1", "--data", packed, "--seq-length", 64]
        whole = self.run_split("packed-whole", 4, 1, *flags)
        got = self.run_split("packed-b1k4", 1, 4, *flags)
        self.assert_same_steps(got, whole, "packed 1 x 4")

    def test_lora_dropout_masks_split_the_same(self):
        # Each sample's dropout mask is keyed by its global number, not by the micro-batch it falls in.
        self.assert_splits_agree("--log-interval", "1", "--lora-rank", 4, "--lora-dropout", 0.3)

    def test_the_logged_loss_is_the_mean_over_counted_targets(self):
        # The evaluation's loss is one mean too: over 2 x 2 samples or 4 x 1, the same validation samples.
        first = self.train(self.tmp / "eval-a", "--micro-batch-size", 2, "--eval-interval", 1, "--eval-iters", 2,
                           iters=1)
        second = self.train(self.tmp / "eval-b", "--micro-batch-size", 4, "--eval-interval", 1, "--eval-iters", 1,
                            iters=1, expect=None)
        self.assertEqual(first.returncode, 0, first.stderr)
        a, b = read_metrics(self.tmp / "eval-a")[-1], read_metrics(self.tmp / "eval-b")[-1]
        self.assertAlmostEqual(a["val_loss"], b["val_loss"], delta=TOLERANCE * b["val_loss"])

    def test_a_resume_may_change_the_split(self):
        for resume_split in ([2, 2], [1, 4]):
            flags = ["--micro-batch-size", 4, "--grad-accum-steps", 1]
            resume = ["--micro-batch-size", resume_split[0], "--grad-accum-steps", resume_split[1]]
            straight, split = self.uninterrupted_and_resumed(f"split{resume_split[0]}", flags, resume_flags=resume)
            got, want = self.losses(split), self.losses(straight)
            self.assertEqual(len(got), 2 * self.N)
            self.assert_close(got, want, TOLERANCE)

    def test_a_step_larger_than_the_data_is_refused(self):
        result = self.train(self.tmp / "huge", "--global-batch-size", 1 << 20, iters=1, expect=2)
        self.assertIn(f"(--global-batch-size {1 << 20}) is more than the", result.stderr)

    def test_a_resume_that_changes_the_global_batch_is_refused(self):
        out = self.tmp / "gb"
        self.train(out, "--save", out / "ckpt", "--micro-batch-size", 4, iters=self.N)
        result = self.train(out, "--save", out / "ckpt", "--resume", "auto", "--micro-batch-size", 2,
                            iters=2 * self.N, expect=2)
        self.assertIn("--global-batch-size is 2 here but 4 in the checkpoint", result.stderr)

    def test_a_longer_run_continues_its_schedule(self):
        out = self.tmp / "longer"
        self.train(out, "--save", out / "ckpt", "--lr-warmup-iters", 1, iters=self.N)
        resumed = self.train(out, "--save", out / "ckpt", "--resume", "auto", "--lr-warmup-iters", 1,
                             iters=2 * self.N)
        self.assertIn(f"the checkpoint's schedule, decaying until step {self.N} (--lr-decay-iters)",
                      resumed.stdout)
        lrs = [r["lr"] for r in read_metrics(out)]
        self.assertEqual(len(lrs), 2 * self.N)
        # Warm-up is not repeated and the decay ended at step N: min-lr (0) after it.
        self.assertGreater(lrs[0], 0)
        self.assertEqual(lrs[self.N:], [0.0] * self.N)
        # Another decay than the checkpoint's is another trajectory: refused by name.
        refused = self.train(out, "--save", out / "ckpt", "--resume", "auto", "--lr-warmup-iters", 1,
                             "--lr-decay-iters", 3 * self.N, iters=3 * self.N, expect=2)
        self.assertIn(f"--lr-decay-iters is {3 * self.N} here but {self.N} in the checkpoint", refused.stderr)

    def test_a_resume_on_other_data_is_refused(self):
        out = self.tmp / "data"
        self.train(out, "--save", out / "ckpt", iters=self.N)
        other = self.tmp / "other"
        prepared = memtrain("prepare", self.text, "--tokenizer", "byte", "--out", other)
        self.assertEqual(prepared.returncode, 0, prepared.stderr)
        result = memtrain("train", "--model", "gpt2-tiny", "--seq-length", 32, "--micro-batch-size", 2,
                          "--threads", 1, "--eval-interval", 0, "--train-iters", 2 * self.N, "--data", other,
                          "--out", out, "--save", out / "ckpt", "--resume", "auto")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn(f"the training data of --data {other}", result.stderr)
        self.assertIn("differs from the checkpoint's", result.stderr)

    def test_an_older_checkpoint_resumes_at_its_step(self):
        out = self.tmp / "older"
        self.train(out, "--save", out / "ckpt", iters=self.N)
        # The step-N checkpoint as an older memtrain wrote it: a window cursor, no sample count.
        checkpoint = out / "ckpt" / f"step_{self.N:08d}"
        rewrite_state(checkpoint, lambda state: state.update(
            data={"epoch": 0, "shard": 0, "window": self.N, "shuffle_seed": state["data"]["shuffle_seed"]}))
        result = self.train(self.tmp / "older-resumed", "--load", checkpoint)
        self.assertIn(f"predates globally numbered samples: continuing the data at sample {2 * self.N}",
                      result.stdout)
        self.assertEqual(len(read_metrics(self.tmp / "older-resumed")), self.N)


class Parallel(SplitCase):
    """Data-parallel ranks split the same global batch: 2 ranks x 2 x 1, 2 x 1 x 2 against one process's 4."""

    def test_data_parallel_splits_agree(self):
        whole = self.run_split("whole", 4, 1, "--log-interval", "1")
        for b, k in [(2, 1), (1, 2)]:
            got = self.run_split(f"dp2-b{b}k{k}", b, k, "--log-interval", "1", ranks=2)
            self.assert_same_steps(got, whole, f"2 ranks x {b} x {k}")

    def test_model_parallel_splits_agree(self):
        # Tensor- and pipeline-parallel ranks split the model, not the data: their matmuls sum in parts, so
        # they follow one process within the layouts' own 1e-5.
        whole = self.run_split("whole", 4, 1, "--log-interval", "1")
        layouts = {"tp2": (2, 2, "--tensor-model-parallel-size"), "pp2": (1, 4, "--pipeline-model-parallel-size")}
        for name, (b, k, flag) in layouts.items():
            got = self.run_split(name, b, k, "--log-interval", "1", flag, 2, ranks=2)
            for step, ((loss, _), (want, _)) in enumerate(zip(got, whole), 1):
                self.assertAlmostEqual(loss, want, delta=1e-5 * want, msg=f"{name} step {step}")

    def test_a_pipeline_resume_may_change_the_split(self):
        pp = ["--pipeline-model-parallel-size", 2]
        straight, split = self.uninterrupted_and_resumed(
            "pp-resume", ["--micro-batch-size", 2, "--grad-accum-steps", 2, *pp], ranks=2,
            resume_flags=["--micro-batch-size", 1, "--grad-accum-steps", 4, *pp])
        self.assert_close(self.losses(split), self.losses(straight), TOLERANCE)

    def test_a_resume_may_change_the_data_parallel_size(self):
        flags = ["--micro-batch-size", 4]
        straight, split = self.uninterrupted_and_resumed(
            "dp-resume", flags, resume_ranks=2, resume_flags=["--micro-batch-size", 2, "--zero-stage", 2])
        self.assert_close(self.losses(split), self.losses(straight), TOLERANCE)


if __name__ == "__main__":
    unittest.main()
