"""--optimizer-in-backward end to end: each block is updated in the backward as soon as its gradients are
complete, with the same per-element arithmetic as the ordinary step, so 6 steps of GPT-2 and LLaMA tiny end in
the same bits as the ordinary run (--clip-grad 0) in every moment format (8-bit moments' quantization blocks
shared by two blocks included), with master weights or without, Adam-mini, LoRA and recompute; the gradients
are planned tensors with lifetimes, measured == planned == estimated, and for GPT-2 tiny exactly the tied
embedding's block (live for the whole backward) plus the largest layer's; a resume is bitwise; what needs every
gradient before the first update runs a first pass for the norm (clipping, fp16), within tolerance of the
ordinary step; two ranks at every ZeRO stage are bitwise the ordinary step and resume bitwise (GPT-2's tied
embedding: the ZeRO-1 step), and Adam-mini in the backward at ZeRO 1, 2 and 3 is bitwise its ordinary ZeRO-1 step; what is not scheduled block by block yet
(accumulation, tensor and pipeline parallelism, offload) is a usage error naming both flags.

Runs the binary memtrain_cli.py names; unittest arguments select, e.g. -k Refusals (TwoRanks needs mpirun).
"""
import unittest

from memtrain_cli import (CATEGORIES, CliTestCase, ResumeTestCase, memtrain, read_memory, read_metrics,
                          run_flags)
from test_estimate import estimate

IN_BACKWARD = ("--optimizer-in-backward", "--clip-grad", "0")
INT8 = ("--exp-avg-dtype", "int8", "--exp-avg-sq-dtype", "int8")


class SameBitsAsTheOrdinaryStep(CliTestCase):
    # name -> (model, flags, the file that holds the trained parameters)
    RUNS = {
        "gpt2 fp32": ("gpt2-tiny", [], "weights"),
        "llama fp32": ("llama-tiny", [], "weights"),
        "gpt2 bf16 master": ("gpt2-tiny", ["--bf16"], "weights"),
        "llama bf16 no master int8": ("llama-tiny", ["--bf16", "--main-params-dtype", "none",
                                                     "--main-grads-dtype", "bf16", *INT8], "weights"),
        "gpt2 fp8 recompute": ("gpt2-tiny", ["--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype", "fp8",
                                             "--recompute-granularity", "full"], "weights"),
        "llama adam-mini": ("llama-tiny", ["--optimizer", "adam-mini"], "weights"),
        "gpt2 adam-mini int8": ("gpt2-tiny", ["--optimizer", "adam-mini", *INT8], "weights"),
        "llama adam-mini fp8 no master": ("llama-tiny", ["--optimizer", "adam-mini", "--bf16", "--main-params-dtype",
                                                         "none", "--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype",
                                                         "fp8"], "weights"),
        "llama lora": ("llama-tiny", ["--lora-rank", "4"], "adapter"),
    }

    def run_once(self, name, model, extra, saved, in_backward):
        out = self.tmp / name.replace(" ", "_")
        target = (["--save-adapter", str(out / "adapter")] if saved == "adapter"
                  else ["--save-weights", str(out / "w.safetensors")])
        flags = run_flags(*extra, *target, "--clip-grad", "0", *(["--optimizer-in-backward"] if in_backward else []),
                          model=model, train_iters=6, log_interval=1)
        self.train(*flags, out=out, expect=0)
        path = out / "adapter" / "adapter_model.safetensors" if saved == "adapter" else out / "w.safetensors"
        return path.read_bytes(), [r["loss"] for r in read_metrics(out)], read_memory(out)

    def test_weights_and_losses_are_bitwise_the_ordinary_step(self):
        for name, (model, extra, saved) in self.RUNS.items():
            with self.subTest(name):
                want_bytes, want_losses, ordinary = self.run_once(name, model, extra, saved, False)
                got_bytes, got_losses, memory = self.run_once(name + " in backward", model, extra, saved, True)
                self.assertEqual(got_losses, want_losses)
                self.assertEqual(got_bytes, want_bytes, f"{name}: the trained parameters differ")
                self.assertEqual(memory["planned"], memory["measured"])
                self.assertLess(memory["planned"]["grads"], ordinary["planned"]["grads"])


def aligned(n, alignment=64):
    return (n + alignment - 1) // alignment * alignment


class PlanEqualsMeasured(CliTestCase):
    def test_gradients_are_the_blocks_in_flight_planned_measured_and_estimated(self):
        flags = run_flags(*IN_BACKWARD, train_iters=2)
        self.train(*flags, expect=0)
        memory = read_memory(self.tmp / "run")
        self.assertEqual(memory["planned"], memory["measured"])
        est = estimate(*flags)
        for c in CATEGORIES:
            self.assertEqual(est["ranks"][0]["bytes"][c], memory["planned"][c], c)
        # GPT-2 tiny (V=256, 128 positions, C=64): the tied wte and wpe get gradients from the head at the start
        # of the backward and from the embedding at its end; each layer's block lives only through its own.
        C, V, P = 64, 256, 128
        embedding = (V + P) * C
        layer = (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C) + 2 * 2 * C
        self.assertEqual(memory["planned"]["grads"], aligned(4 * embedding) + aligned(4 * layer))

    def test_explain_lists_each_gradient_tensor_with_its_lifetime(self):
        result = memtrain("estimate", *run_flags(*IN_BACKWARD, *INT8, "--bf16"), "--explain")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("--optimizer-in-backward: the gradients of the blocks in flight only", result.stdout)
        listed = [line.split() for line in result.stdout.splitlines() if line.startswith("  grads.")]
        # 4 blocks (embedding, 2 layers, final norm) and a carry per quantization block two of them share
        # (124,672 parameters in blocks of 2048: the layers' and the final norm's boundaries fall inside one).
        self.assertEqual(sorted(w[0] for w in listed if w[0].startswith("grads.block")),
                         ["grads.block0", "grads.block1", "grads.block2", "grads.block3"])
        self.assertEqual(len([w for w in listed if w[0].startswith("grads.carry")]), 2)
        self.assertIn("ops 18-37 (lm_head .. embed.backward)", result.stdout)

    def test_estimate_of_a_7b_full_fine_tune_shows_the_block_gradients(self):
        flags = ["--model", "llama2-7b", "--bf16", "--main-params-dtype", "none", "--main-grads-dtype", "bf16",
                 "--recompute-granularity", "full", "--seq-length", "2048", "--micro-batch-size", "1", *INT8]
        ordinary = estimate(*flags)["ranks"][0]["bytes"]
        in_backward = estimate(*flags, *IN_BACKWARD)["ranks"][0]["bytes"]
        # Llama-2-7B's largest blocks: a layer (4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 norms) and the
        # untied embedding and head (32000 x 4096), each live only through its own ops: a layer's is the most
        # live at once, in bf16 (its size a multiple of the quantization block: no carry).
        layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
        self.assertEqual(ordinary["grads"], 2 * 6738415616)
        self.assertEqual(in_backward["grads"], 2 * layer)
        for c in CATEGORIES:
            if c != "grads":
                self.assertEqual(in_backward[c], ordinary[c], c)

    def test_a_7b_full_fine_tune_plans_within_24_gib_with_adam_mini(self):
        # bf16 weights without a master copy, full recompute, Adam-mini's int8 m and one fp32 v per block, the
        # update in the backward: every term printed, the total at most 24 GiB.
        flags = ["--model", "llama2-7b", "--bf16", "--main-params-dtype", "none", "--main-grads-dtype", "bf16",
                 "--recompute-granularity", "full", "--seq-length", "2048", "--micro-batch-size", "1", *INT8,
                 "--optimizer", "adam-mini", *IN_BACKWARD]
        rank = estimate(*flags)["ranks"][0]
        n, layer, blocks = 6738415616, 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096, 1163841
        self.assertEqual(rank["bytes"]["params"], 2 * n)
        self.assertEqual(rank["bytes"]["grads"], 2 * layer)
        self.assertEqual(rank["bytes"]["optim"], n + 4 * -(-n // 2048) + 4 * blocks)  # m, its scales, v
        self.assertLessEqual(rank["total_bytes"], 24 * 2 ** 30)
        text = memtrain("estimate", *flags).stdout
        for term in ("parameters", "gradients", "optimizer states", "activations", "workspace", "total"):
            self.assertIn(term, text)


class Refusals(CliTestCase):
    def test_what_is_not_scheduled_block_by_block_is_refused_naming_both_flags(self):
        for extra, mentions in (
                ([*IN_BACKWARD, "--grad-accum-steps", "2"], ["--optimizer-in-backward", "accumulation"]),
                ([*IN_BACKWARD, "--offload-optimizer", "nvme", "--offload-path", "."],
                 ["--optimizer-in-backward", "--offload-optimizer"])):
            with self.subTest(extra=extra):
                out = self.tmp / "refused"
                self.assert_error(self.train(*extra, out=out), 2, *mentions)
                self.assertFalse(out.exists() and any(out.iterdir()), f"{out} written")

    def test_model_parallel_is_refused_by_the_estimate(self):
        for extra, mentions in ((["--tp", "2"], ["--tensor-model-parallel-size 2"]),
                                (["--pp", "2"], ["--pipeline-model-parallel-size 2"])):
            with self.subTest(extra=extra):
                result = memtrain("estimate", *run_flags(*IN_BACKWARD), *extra)
                self.assert_error(result, 2, "--optimizer-in-backward", *mentions)


class NormFirst(ResumeTestCase):
    """Clipping and fp16's overflow check run a first pass for the step's norm: the same steps as the ordinary
    update within the precision tests' tolerance (the norm is summed block by block, not in one reduction)."""

    def test_clipping_and_fp16_follow_the_ordinary_step(self):
        for name, extra in (("fp32", []), ("bf16", ["--bf16"]), ("fp16", ["--fp16"])):
            with self.subTest(name):
                runs = {}
                for mode, flags in (("ordinary", []), ("in-backward", ["--optimizer-in-backward"])):
                    out = self.tmp / f"{name}-{mode}"
                    # --clip-grad 1 (the default) clips every step of this run: the norm starts near 4.
                    self.train(out, *extra, *flags, "--save-weights", str(out / "w.safetensors"))
                    runs[mode] = out
                want, got = read_metrics(runs["ordinary"]), read_metrics(runs["in-backward"])
                self.assertGreater(want[0]["grad_norm"], 1.0)
                self.assert_close([r["loss"] for r in got], [r["loss"] for r in want])
                self.assert_close([r["grad_norm"] for r in got], [r["grad_norm"] for r in want])
                if name == "fp32":
                    self.assert_same_weights(runs["in-backward"] / "w.safetensors",
                                             runs["ordinary"] / "w.safetensors", 1e-5)


class TwoRanks(ResumeTestCase):
    def final_states(self, out):
        """The final checkpoint's model file and both ranks' files (weights or their shards, master, moments)."""
        final = out / "ckpt" / f"step_{2 * self.N:08d}"
        return [(final / name).read_bytes() for name in ("model.safetensors", "rank0.safetensors", "rank1.safetensors")]

    def test_every_zero_stage_is_bitwise_the_ordinary_step_and_resumes_bitwise(self):
        for stage in ("0", "1", "2", "3"):
            with self.subTest(stage=stage):
                flags = ["--model", "llama-tiny", "--global-batch-size", "4", "--zero-stage", stage, *INT8,
                         "--clip-grad", "0"]
                runs = {}
                for mode, extra in (("ordinary", []), ("in-backward", ["--optimizer-in-backward"])):
                    out = self.tmp / f"zero{stage}-{mode}"
                    self.train(out, *flags, *extra, "--save", str(out / "ckpt"), ranks=2)
                    runs[mode] = (self.final_states(out), [r["loss"] for r in read_metrics(out)])
                    for rank in range(2):
                        memory = read_memory(out, rank)
                        self.assertEqual(memory["planned"], memory["measured"])
                self.assertEqual(len(runs["ordinary"][1]), 2 * self.N)
                self.assertEqual(runs["in-backward"], runs["ordinary"])
        for stage in ("1", "3"):
            with self.subTest(resume_stage=stage):
                self.assert_bitwise(f"two{stage}", ["--global-batch-size", "4", "--zero-stage", stage, *IN_BACKWARD],
                                    ranks=2)

    def assert_the_zero_1_step(self, name, flags, stages):
        """The update in the backward at each of `stages` against the ordinary ZeRO-1 step (--clip-grad 0): the
        final model file and the losses bit for bit, planned == measured on both ranks."""
        runs = {}
        for run, extra in (("ordinary", ["--zero-stage", "1"]),
                           *((stage, ["--zero-stage", stage, "--optimizer-in-backward"]) for stage in stages)):
            out = self.tmp / f"{name}-{run}"
            self.train(out, *flags, "--clip-grad", "0", *extra, "--save", str(out / "ckpt"), ranks=2)
            runs[run] = (self.final_states(out)[0], [r["loss"] for r in read_metrics(out)])
            for rank in range(2):
                memory = read_memory(out, rank)
                self.assertEqual(memory["planned"], memory["measured"])
        self.assertEqual(len(runs["ordinary"][1]), 2 * self.N)
        for stage in stages:
            self.assertEqual(runs[stage], runs["ordinary"], f"{name} at ZeRO {stage}")

    def test_a_tied_embedding_in_the_backward_at_every_stage_is_bitwise_the_zero_1_step(self):
        # GPT-2's head and embedding both write the tied embedding's gradients: the update in the backward sums
        # them on each rank and reduces the block once, as ZeRO 0 and 1 reduce the whole buffer; the ordinary
        # ZeRO-2/3 step reduces the head's window and the embedding's separately (another order of the sums).
        self.assert_the_zero_1_step("tied", ["--model", "gpt2-tiny", "--global-batch-size", "4"],
                                    ("0", "1", "2", "3"))

    def test_clipping_on_two_ranks_follows_the_ordinary_step(self):
        # Each block is reduced to the owners of its parts; the norm pass sums the ranks' parts' squares.
        flags = ["--model", "llama-tiny", "--global-batch-size", "4", "--zero-stage", "2", "--clip-grad", "0.5"]
        runs = {}
        for mode, extra in (("ordinary", []), ("in-backward", ["--optimizer-in-backward"])):
            out = self.tmp / f"clip-{mode}"
            self.train(out, *flags, *extra, ranks=2)
            runs[mode] = read_metrics(out)
        self.assertGreater(runs["ordinary"][0]["grad_norm"], 0.5)
        for key in ("loss", "grad_norm"):
            self.assert_close([r[key] for r in runs["in-backward"]], [r[key] for r in runs["ordinary"]])

    def test_adam_mini_in_the_backward_at_every_stage_is_bitwise_its_zero_1_step(self):
        # Each rank steps every block's v from the block's all-reduced gradients, and its shard of m (cut
        # through tensors) after: the ordinary ZeRO-1 step's arithmetic (at ZeRO 2 and 3 the ordinary step sums
        # a block cut by a shard's edge in two parts).
        self.assert_the_zero_1_step("mini", ["--model", "llama-tiny", "--global-batch-size", "4", "--optimizer",
                                             "adam-mini", *INT8], ("1", "2", "3"))


class PlanOffersThem(CliTestCase):
    def test_plan_lists_the_update_in_the_backward_and_adam_mini_with_the_estimates_bytes(self):
        result = memtrain("plan", "--model", "llama-tiny", "--seq-length", "32", "--ranks", "1", "--device-memory",
                          "3MiB", "--global-batch-size", "4", "--top", "200")
        self.assertEqual(result.returncode, 0, result.stderr)
        found = {}
        lines = result.stdout.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("per rank") and lines[i + 1].strip().startswith("memtrain train"):
                command = lines[i + 1].split()
                for flag in ("--optimizer-in-backward", "adam-mini"):
                    if flag in command and flag not in found:
                        found[flag] = (int(line.split("= ")[1].split(" B")[0]), command)
        self.assertEqual(set(found), {"--optimizer-in-backward", "adam-mini"}, result.stdout[-2000:])
        for flag, (planned, command) in found.items():
            with self.subTest(flag):
                flags = [w for w in command[2:] if w != "--data" and w != "DATA"]
                self.assertEqual(estimate(*flags)["ranks"][0]["total_bytes"], planned)

    def test_two_ranks_plan_the_update_in_the_backward_at_zero_3_with_the_estimates_bytes(self):
        result = memtrain("plan", "--model", "llama-tiny", "--seq-length", "32", "--ranks", "2", "--device-memory",
                          "3MiB", "--global-batch-size", "4", "--top", "400")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        chosen = [(lines[i], lines[i + 1].split()) for i, line in enumerate(lines[:-1])
                  if line.strip().startswith("per rank") and "--optimizer-in-backward" in lines[i + 1]
                  and "--zero-stage 3" in lines[i + 1]]
        self.assertTrue(chosen, result.stdout[-2000:])
        line, command = chosen[0]
        flags = [w for w in command[command.index("train") + 1:] if w != "--data" and w != "DATA"]
        ranks = estimate(*flags, "--dp", "2")["ranks"]
        self.assertEqual(max(r["total_bytes"] for r in ranks), int(line.split("= ")[1].split(" B")[0]))


class Resume(ResumeTestCase):
    def test_resume_is_bitwise(self):
        for name, extra in (("gpt2", []), ("llama-int8", ["--model", "llama-tiny", *INT8])):
            with self.subTest(name):
                self.assert_bitwise(name, [*IN_BACKWARD, *extra])

    def test_a_checkpoint_resumes_under_the_other_mode_bitwise(self):
        # The modes share the per-element arithmetic: a run may switch into (or out of) the mode at a resume.
        straight, split = self.uninterrupted_and_resumed("switch", ["--clip-grad", "0"],
                                                         resume_flags=list(IN_BACKWARD))
        self.assertEqual(self.losses(split), self.losses(straight))
        final = f"ckpt/step_{2 * self.N:08d}/rank0.safetensors"
        self.assertEqual((split / final).read_bytes(), (straight / final).read_bytes())


if __name__ == "__main__":
    unittest.main()
