"""--optimizer adam-mini end to end: every run's memory.json measures its plan, whose optimizer states are the
first moment per element (fp32, bf16, or 8 bits with an fp32 scale per quantization block, as AdamW's) plus
exactly one fp32 second moment per block of Adam-mini's partition (4 bytes a block, the blocks counted here from
the model's shapes), estimate prints the same bytes and the block count, and two data-parallel ranks at ZeRO 0
(each holding the whole state) follow one process; at ZeRO-1 (each rank holding its shard of m, cut through a
tensor, and every block's v, stepped from the whole gradients) they are bitwise ZeRO 0's; at ZeRO 2 and 3
(the blocks' sums of squares added over the ranks' shards, 8 planned bytes a block) within rounding of them. A resume is bitwise
the uninterrupted run (rank 0's file holds the v blocks; 8-bit m keeps its scales, v has none), in one process
and on two ranks at ZeRO 0, 1 and 3; a ZeRO-1 checkpoint resumes at ZeRO 0 on two ranks bitwise and in one process with its
states loaded as saved; a resume that changes --optimizer is refused by name; what Adam-mini does not support
is refused by a usage error naming both flags. The per-step arithmetic is tests/parity/test_adam_mini_parity.py's.

Runs the binary memtrain_cli.py names; unittest arguments select, e.g. -k Refusals.
"""
import unittest

from memtrain_cli import (CATEGORIES, CliTestCase, ResumeTestCase, memtrain, read_json, read_memory, read_metrics,
                          read_safetensors, run_flags)
from test_estimate import estimate
from test_moment_resume import flat_states

MINI = ("--optimizer", "adam-mini")
INT8 = ("--exp-avg-dtype", "int8", "--exp-avg-sq-dtype", "int8")
FP8 = ("--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype", "fp8")
GPT2_TINY_PARAMS = 124_672


def m_bytes(params, size, block):
    """m's bytes: `size` per parameter, and a 4-byte scale per quantization block of `block` (None: no scales)."""
    return params * size + (4 * -(-params // block) if block else 0)


def gpt2_tiny_blocks(L=2, H=4, C=64, positions=128, V=256):
    """wte and wpe per row; per layer: c_attn q and k per head, v per output neuron (a column), its bias one;
    c_proj, c_fc, mlp.c_proj per output neuron with one block per bias; 2 LayerNorms of 2 vectors; ln_f."""
    layer = (H + H + C) + 1 + C + 1 + 4 * C + 1 + C + 1 + 4
    return V + positions + L * layer + 2


def llama_tiny_blocks(L=2, H=4, KV=2, C=64, I=176, V=256, untied=True):
    """embed_tokens (and an untied lm_head) per token; per layer: q per query head, k per KV head, v, o_proj,
    gate_up and down_proj per output neuron (a row), 2 RMSNorm weights; the final norm."""
    hs = C // H
    layer = (H + KV + KV * hs) + C + 2 * I + C + 2
    return V * (2 if untied else 1) + L * layer + 1


class PlanEqualsMeasured(CliTestCase):
    # name -> (model, flags, bytes of m per parameter, elements per scale of m, blocks)
    RUNS = {
        "gpt2 fp32": ("gpt2-tiny", [], 4, None, gpt2_tiny_blocks()),
        "gpt2 bf16 m": ("gpt2-tiny", ["--bf16", "--o2-optimizer"], 2, None, gpt2_tiny_blocks()),
        "llama fp32": ("llama-tiny", [], 4, None, llama_tiny_blocks()),
        "gpt2 int8 m": ("gpt2-tiny", INT8, 1, 2048, gpt2_tiny_blocks()),
        "llama bf16 fp8 m": ("llama-tiny", ["--bf16", *FP8], 1, 128, llama_tiny_blocks()),
    }

    def test_v_is_four_bytes_per_block_planned_measured_and_estimated(self):
        for name, (model, extra, m_size, m_block, blocks) in self.RUNS.items():
            with self.subTest(name):
                flags = run_flags(*extra, *MINI, model=model, train_iters=2)
                out = self.tmp / name.replace(" ", "_")
                self.train(*flags, out=out, expect=0)
                memory = read_memory(out)
                self.assertEqual(memory["planned"], memory["measured"])
                self.assertEqual(memory["planned"]["optim"],
                                 m_bytes(memory["num_params"], m_size, m_block) + 4 * blocks)
                est = estimate(*flags)
                for c in CATEGORIES:
                    self.assertEqual(est["ranks"][0]["bytes"][c], memory["planned"][c], f"{name} {c}")
                text = memtrain("estimate", *flags)
                self.assertEqual(text.returncode, 0, text.stderr)
                self.assertIn(f"Adam-mini's v one F32 per block, {blocks} blocks", text.stdout)

    def test_adamw_is_the_default_and_keeps_v_per_element(self):
        flags = run_flags()
        self.assertEqual(estimate(*flags), estimate(*flags, "--optimizer", "adamw"))
        params = GPT2_TINY_PARAMS
        self.assertEqual(estimate(*flags)["ranks"][0]["bytes"]["optim"], 2 * 4 * params)
        self.assertEqual(estimate(*flags, *MINI)["ranks"][0]["bytes"]["optim"], 4 * params + 4 * gpt2_tiny_blocks())
        # 8 bits: AdamW's v and its scales become Adam-mini's blocks.
        self.assertEqual(estimate(*flags, *INT8)["ranks"][0]["bytes"]["optim"], 2 * m_bytes(params, 1, 2048))
        self.assertEqual(estimate(*flags, *INT8, *MINI)["ranks"][0]["bytes"]["optim"],
                         m_bytes(params, 1, 2048) + 4 * gpt2_tiny_blocks())


class TwoRanks(CliTestCase):
    def test_zero_0_follows_one_process(self):
        for name, extra, m_size, m_block in (("fp32", [], 4, None), ("int8", INT8, 1, 2048)):
            with self.subTest(name):
                flags = run_flags(*MINI, *extra, train_iters=3, global_batch_size=4)
                self.train(*flags, out=self.tmp / name / "one", expect=0)
                result = self.train(*flags, out=self.tmp / name / "two", ranks=2)
                self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
                one, two = read_metrics(self.tmp / name / "one"), read_metrics(self.tmp / name / "two")
                self.assertEqual(len(one), 3)
                for a, b in zip(one, two):  # the same sums of gradients, reduced in another order
                    self.assertAlmostEqual(a["loss"], b["loss"], delta=1e-6 * abs(a["loss"]))
                for rank in range(2):
                    memory = read_memory(self.tmp / name / "two", rank)
                    self.assertEqual(memory["planned"], memory["measured"])
                    self.assertEqual(memory["planned"]["optim"],
                                     m_bytes(memory["num_params"], m_size, m_block) + 4 * gpt2_tiny_blocks())


    def test_zero_1_is_zero_0_bitwise(self):
        # gpt2-tiny's 124,672 parameters: rank 1's shard starts at 62,336 (fp32 m) or 63,488 (int8's blocks of
        # 2048), inside layer 0's tensors either way.
        for name, extra, m_size, m_block in (("fp32", [], 4, None), ("int8", INT8, 1, 2048),
                                             ("bf16-int8", ["--bf16", "--main-params-dtype", "none", *INT8], 1, 2048)):
            with self.subTest(name):
                runs = {}
                for stage in ("0", "1"):
                    out = self.tmp / name / stage
                    flags = run_flags(*MINI, *extra, "--zero-stage", stage, train_iters=3, global_batch_size=4)
                    result = self.train(*flags, "--save-weights", out / "w.safetensors", out=out, ranks=2)
                    self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
                    runs[stage] = ([r["loss"] for r in read_metrics(out)], (out / "w.safetensors").read_bytes())
                    est = estimate(*flags, "--dp", "2")
                    first_shard = est["ranks"][0]["shard"]  # S elements, every rank's m planned for S
                    for rank in range(2):
                        memory = read_memory(out, rank)
                        self.assertEqual(memory["planned"], memory["measured"])
                        for c in CATEGORIES:
                            self.assertEqual(est["ranks"][rank]["bytes"][c], memory["planned"][c], f"{rank} {c}")
                        self.assertEqual(memory["planned"]["optim"], m_bytes(first_shard[1] - first_shard[0], m_size,
                                                                             m_block) + 4 * gpt2_tiny_blocks())
                self.assertEqual(len(runs["1"][0]), 3)
                self.assertEqual(runs["1"], runs["0"])

    def test_zero_2_and_3_follow_zero_1_with_the_block_sums_planned(self):
        # A rank holds only its shard of the gradients: each block's squares are summed per shard (an fp64 per
        # block, planned), added over the ranks, then v steps; a block cut by the shards' edge is summed in two
        # parts, so within rounding of ZeRO-1, not bitwise.
        losses = {}
        for stage in ("1", "2", "3"):
            out = self.tmp / f"zero{stage}"
            flags = run_flags(*MINI, *INT8, "--zero-stage", stage, train_iters=3, global_batch_size=4)
            result = self.train(*flags, out=out, ranks=2)
            self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
            losses[stage] = [r["loss"] for r in read_metrics(out)]
            est = estimate(*flags, "--dp", "2")
            shard = est["ranks"][0]["shard"][1] - est["ranks"][0]["shard"][0]
            sums = 8 * gpt2_tiny_blocks() if stage != "1" else 0
            for rank in range(2):
                memory = read_memory(out, rank)
                self.assertEqual(memory["planned"], memory["measured"])
                for c in CATEGORIES:
                    self.assertEqual(est["ranks"][rank]["bytes"][c], memory["planned"][c], f"zero{stage} {rank} {c}")
                self.assertEqual(memory["planned"]["optim"], m_bytes(shard, 1, 2048) + 4 * gpt2_tiny_blocks() + sums)
        self.assertEqual(len(losses["1"]), 3)
        for stage in ("2", "3"):
            for got, want in zip(losses[stage], losses["1"]):
                self.assertAlmostEqual(got, want, delta=1e-6 * abs(want), msg=f"zero{stage}")


class OneProcessResume(ResumeTestCase):
    def test_resume_is_bitwise_and_rank_0_holds_the_blocks(self):
        for name, extra, blocks in (("gpt2", [], gpt2_tiny_blocks()),
                                    ("llama-bf16", ["--model", "llama-tiny", "--bf16", "--o2-optimizer"],
                                     llama_tiny_blocks()),
                                    ("gpt2-int8", INT8, gpt2_tiny_blocks())):
            with self.subTest(name):
                straight = self.assert_bitwise(name, [*MINI, *extra])
                files = read_safetensors(straight / f"ckpt/step_{2 * self.N:08d}/rank0.safetensors", dtype=None)
                self.assertNotIn("adam_v", files)
                self.assertNotIn("adam_v_scales", files)
                self.assertEqual(files["adam_mini_v"][0], [blocks])
                self.assertEqual(len(files["adam_mini_v"][1]), 4 * blocks)
                if extra == INT8:  # m as AdamW's int8 m: a byte per parameter, a scale per 2048
                    self.assertEqual(files["adam_m"][0], [GPT2_TINY_PARAMS])
                    self.assertEqual(files["adam_m_scales"][0], [-(-GPT2_TINY_PARAMS // 2048)])

    def test_a_resume_that_changes_the_optimizer_is_refused(self):
        for saved, resumed in (("adamw", "adam-mini"), ("adam-mini", "adamw")):
            with self.subTest(saved=saved):
                out = self.tmp / saved
                self.train(out, "--save", str(out / "ckpt"), "--exit-interval", str(self.N), "--optimizer", saved)
                result = self.train(out, "--save", str(out / "ckpt"), "--resume", "auto", "--optimizer", resumed,
                                    expect=2)
                self.assertIn("--optimizer", result.stderr)
                self.assertIn(resumed, result.stderr)


class TwoRanksResume(ResumeTestCase):
    def test_resume_is_bitwise(self):
        for stage in ("0", "1", "3"):
            with self.subTest(stage=stage):
                self.assert_bitwise(f"two{stage}", [*MINI, "--global-batch-size", "4", "--zero-stage", stage], ranks=2)

    def test_a_zero_1_checkpoint_resumes_at_zero_0_and_in_one_process(self):
        common = [*MINI, *INT8, "--global-batch-size", "4"]
        for ranks, stage in ((2, "0"), (1, "0")):
            name = f"zero1-to-{ranks}"
            with self.subTest(ranks=ranks):
                straight, split = self.uninterrupted_and_resumed(name, [*common, "--zero-stage", "1"], 2, ranks,
                                                                 [*common, "--zero-stage", stage])
                saved = split / "ckpt" / f"step_{self.N:08d}"
                out = self.tmp / f"{name}-resaved"
                self.train(out, "--load", str(saved), "--save", str(out / "ckpt"), *common, "--zero-stage", stage,
                           ranks=ranks, iters=self.N)
                resaved = out / "ckpt" / saved.name
                self.assertEqual(read_json(resaved / "state.json")["layout"]["world"], ranks)
                states = ("weights", "adam_m", "adam_m_scales", "adam_mini_v")
                before, after = flat_states(saved, states), flat_states(resaved, states)
                self.assertEqual(after, before)
                self.assertEqual(len(before["adam_mini_v"]), 4 * gpt2_tiny_blocks())
                losses = [r["loss"] for r in self.records(split)]
                expected = [r["loss"] for r in self.records(straight)]
                if ranks == 2:  # ZeRO 0 and 1 step alike on the same two ranks
                    self.assertEqual(losses, expected)
                else:  # one process sums the ranks' gradients in another order
                    self.assertEqual(losses[:self.N], expected[:self.N])
                    self.assert_close(losses, expected, 1e-5)


class Refusals(CliTestCase):
    def test_what_adam_mini_does_not_support_is_refused_by_name(self):
        cases = [
            (["--tensor-model-parallel-size", "2"], "--tensor-model-parallel-size 2"),
            (["--pipeline-model-parallel-size", "2"], "--pipeline-model-parallel-size 2"),
            (["--offload-optimizer", "nvme", "--offload-path", str(self.tmp)], "--offload-optimizer nvme"),
            (["--lora-rank", "4"], "--lora-rank"),
            (["--bf16", "--o2-optimizer", "--o2-stochastic-rounding"], "--o2-stochastic-rounding"),
        ]
        for words, named in cases:
            with self.subTest(named):
                out = self.tmp / "failed"
                self.assert_error(self.train(*MINI, *words, out=out), 2, "--optimizer adam-mini", named)
                self.assertFalse((out / "memory.json").exists())
                result = memtrain("estimate", *run_flags(*MINI, *words))
                self.assert_error(result, 2, "--optimizer adam-mini", named)

    def test_moment_dtypes_are_given_as_one(self):
        # v is fp32 per block whatever --exp-avg-sq-dtype says, but the two are still given alike.
        result = memtrain("estimate", *run_flags(*MINI, "--exp-avg-dtype", "int8"))
        self.assert_error(result, 2, "--exp-avg-dtype int8 with --exp-avg-sq-dtype fp32", "give both the same")

    def test_unknown_optimizer(self):
        self.assert_error(self.train("--optimizer", "sgd"), 2, "--optimizer sgd", "adamw or adam-mini")


if __name__ == "__main__":
    unittest.main()
