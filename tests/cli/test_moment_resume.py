"""8-bit Adam moments (--exp-avg-dtype/--exp-avg-sq-dtype int8 or fp8) through checkpoints, ZeRO and offload: 2n
steps equal n steps and a resume bit for bit in one process, at ZeRO 1, 2 and 3 on two ranks and with NVMe
offload; across world sizes a checkpoint saved right after loading holds the saved codes and scales byte for
byte (blocks are global: nothing is requantized) and the losses continue within 1e-5; every rank's memory.json
measures its plan, padding and scales included, and estimate prints the same bytes.

The models make blocks and shards uneven. gpt2-tiny has 124,672 parameters: 60.875 int8 blocks of 2048, so its
last block is short, and two ranks' shards of 62,336 pad to 63,488. Its count is a multiple of fp8's block of
128, so fp8 runs on llama-tiny, whose count (and half of it) is not.

Runs the binary memtrain_cli.py names; unittest arguments select, e.g. -k OneProcess.
"""
import math
import unittest

import test_estimate
from memtrain_cli import CliTestCase, ResumeTestCase, read_json, read_memory, read_safetensors

# moments -> (model, elements per scale)
FORMATS = {"int8": ("gpt2-tiny", 2048), "fp8": ("llama-tiny", 128)}
STATE_TENSORS = ("weights", "master", "adam_m", "adam_v", "adam_m_scales", "adam_v_scales")
CHUNK_ELEMS = 2621  # --offload-chunk-mb 0.01 in fp32 elements, before rounding up to whole blocks


def moment_flags(moments):
    """bf16 weights, fp32 master, fp32 gradients and 8-bit moments."""
    return ["--bf16", "--exp-avg-dtype", moments, "--exp-avg-sq-dtype", moments]


def run_flags_of(moments):
    return ["--model", FORMATS[moments][0], *moment_flags(moments)]


def shard_of(num_params, ranks, block):
    """ZeRO's shard: ceil(n / ranks) rounded up to whole blocks; n itself in one process."""
    return num_params if ranks == 1 else math.ceil(math.ceil(num_params / ranks) / block) * block


def offload_flags(tmp, name):
    path = tmp / f"{name}-nvme"
    path.mkdir()
    # The shards stream in several chunks of whole blocks.
    return ["--offload-optimizer", "nvme", "--offload-path", str(path), "--offload-chunk-mb", "0.01"]


def flat_states(checkpoint, names=STATE_TENSORS):
    """Each state tensor of a checkpoint's rank files that hold it, concatenated in rank order: the flat order
    (Adam-mini's v, whole, only in rank 0's)."""
    world = read_json(checkpoint / "state.json")["layout"]["world"]
    files = [read_safetensors(checkpoint / f"rank{r}.safetensors", dtype=None) for r in range(world)]
    return {name: b"".join(tensors[name][1] for tensors in files if name in tensors) for name in names}


class OneProcess(ResumeTestCase):
    def test_resume_is_bitwise_in_memory_and_offloaded(self):
        for moments in FORMATS:
            with self.subTest(moments=moments):
                self.assert_bitwise(moments, run_flags_of(moments))
            with self.subTest(moments=moments, offload=True):
                offload = offload_flags(self.tmp, moments)
                straight = self.assert_bitwise(f"{moments}-offload", [*run_flags_of(moments), *offload])
                # The offloaded run is the in-memory one: the final rank files, scales included, are the same.
                final = f"ckpt/step_{2 * self.N:08d}/rank0.safetensors"
                in_memory = self.tmp / f"{moments}-straight"
                self.assertEqual((straight / final).read_bytes(), (in_memory / final).read_bytes())


class TwoRanks(ResumeTestCase):
    def test_zero_stages_resume_bitwise(self):
        for moments in FORMATS:
            for stage in ("1", "2", "3"):
                with self.subTest(moments=moments, stage=stage):
                    self.assert_bitwise(f"{moments}-zero{stage}", ["--zero-stage", stage, "--global-batch-size", "4",
                                                                   *run_flags_of(moments)], ranks=2)

    def test_offloaded_zero_resumes_bitwise(self):
        for moments, stage in (("int8", "1"), ("fp8", "3")):
            with self.subTest(moments=moments, stage=stage):
                name = f"{moments}-zero{stage}-offload"
                self.assert_bitwise(name, ["--zero-stage", stage, "--global-batch-size", "4", *run_flags_of(moments),
                                           *offload_flags(self.tmp, name)], ranks=2)


class AcrossWorldSizes(ResumeTestCase):
    def resave(self, name, checkpoint, ranks, flags):
        """Loads `checkpoint` on `ranks` with `flags` and saves it at the same step, with no update between;
        returns the new checkpoint."""
        out = self.tmp / f"{name}-resaved"
        result = self.train(out, "--load", str(checkpoint), "--save", str(out / "ckpt"), *flags, ranks=ranks,
                            iters=self.N)
        self.assertIn("saved checkpoint", result.stdout)
        resaved = out / "ckpt" / checkpoint.name
        self.assertEqual(read_json(resaved / "state.json")["layout"]["world"], ranks)
        return resaved

    def test_loaded_moments_are_the_saved_ones_and_the_losses_continue(self):
        zero = {stage: ["--zero-stage", stage] for stage in "0123"}
        offload = offload_flags(self.tmp, "across")
        # (moments, saving ranks and flags, loading ranks and flags). One process loading with offload reads
        # chunks of 4096 that straddle the saved ranks' boundary at 63,488.
        cases = (("int8", 2, zero["1"], 1, []), ("int8", 1, [], 2, zero["2"]), ("int8", 2, zero["3"], 1, offload),
                 ("int8", 2, zero["0"], 2, zero["3"]), ("fp8", 2, zero["2"], 1, []), ("fp8", 1, [], 2, zero["3"]),
                 ("fp8", 1, offload, 2, zero["1"]))
        for moments, saving_ranks, saving, loading_ranks, loading in cases:
            name = f"{moments}-{saving_ranks}{''.join(saving[1:2])}to{loading_ranks}{''.join(loading[1:2])}"
            with self.subTest(case=name):
                common = ["--global-batch-size", "4", *run_flags_of(moments)]
                straight, split = self.uninterrupted_and_resumed(name, [*common, *saving], saving_ranks,
                                                                 loading_ranks, [*common, *loading])
                # Blocks are global: the codes and scales (and every other state) load as saved, requantized
                # nowhere, and save again as the same bytes in flat order.
                final = split / "ckpt" / f"step_{2 * self.N:08d}"
                self.assertEqual(read_json(final / "state.json")["layout"]["world"], loading_ranks)
                saved = split / "ckpt" / f"step_{self.N:08d}"
                before = flat_states(saved)
                after = flat_states(self.resave(name, saved, loading_ranks, [*common, *loading]))
                for tensor in STATE_TENSORS:
                    self.assertEqual(after[tensor], before[tensor], tensor)
                block = FORMATS[moments][1]
                self.assertEqual(len(before["adam_m_scales"]), 4 * math.ceil(len(before["adam_m"]) / block))
                losses = [r["loss"] for r in self.records(split)]
                expected = [r["loss"] for r in self.records(straight)]
                self.assertEqual(len(losses), 2 * self.N)
                self.assertEqual(losses[:self.N], expected[:self.N])
                for got, want in zip(losses[self.N:], expected[self.N:]):
                    self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))


class PlanEqualsMeasured(CliTestCase):
    # Trains one step and compares every category of every rank with `memtrain estimate` of the same flags.
    check = test_estimate.EstimateEqualsTrainer.check

    def assert_moment_bytes(self, memory, moments, shard):
        """Both moments: a byte per element of the padded shard, and an fp32 scale per block begun."""
        block = FORMATS[moments][1]
        self.assertEqual(memory["planned"]["optim"], 2 * (shard + 4 * math.ceil(shard / block)))

    def test_zero_stages_on_two_ranks(self):
        for moments, (model, block) in FORMATS.items():
            for stage in ("1", "2", "3"):
                with self.subTest(moments=moments, stage=stage):
                    name = f"{moments}-zero{stage}"
                    self.check(name, ["--zero-stage", stage, "--global-batch-size", "4", *moment_flags(moments)],
                               ranks=2, model=model)
                    num_params = read_memory(self.tmp / name, 0)["num_params"]
                    shard = shard_of(num_params, 2, block)
                    self.assertGreater(2 * shard, num_params)  # the second rank's shard is padded
                    for rank in (0, 1):
                        self.assert_moment_bytes(read_memory(self.tmp / name, rank), moments, shard)

    def test_offloaded(self):
        for moments, ranks, stage in (("int8", 1, "0"), ("fp8", 2, "1"), ("int8", 2, "3")):
            (model, block) = FORMATS[moments]
            with self.subTest(moments=moments, ranks=ranks, stage=stage):
                name = f"{moments}-offload-{ranks}-zero{stage}"
                est = self.check(name, ["--zero-stage", stage, "--global-batch-size", "4", *moment_flags(moments),
                                        *offload_flags(self.tmp, name)], ranks=ranks, model=model)
                memory = read_memory(self.tmp / name, None if ranks == 1 else 0)
                shard = shard_of(memory["num_params"], ranks, block)
                chunk = min(math.ceil(CHUNK_ELEMS / block) * block, shard)
                self.assert_moment_bytes(memory, moments, 2 * chunk)
                # The file: fp32 master, both moments and their scales over the padded shard.
                file_bytes = shard * (4 + 2) + 2 * 4 * math.ceil(shard / block)
                self.assertEqual(memory["offloaded_optimizer_file_bytes"], file_bytes)
                self.assertEqual(est["ranks"][0]["offloaded_optimizer_file_bytes"], file_bytes)


if __name__ == "__main__":
    unittest.main(verbosity=2)
