"""memtrain estimate against the trainer itself: for a matrix of small configurations (precision x O2 flags x
recompute x accumulation x evaluation x checkpoints x offload, one process and 2 ranks under mpirun at every
ZeRO stage), every category estimate prints equals the planned and the measured bytes of the run's memory.json
on every rank, and the op where the estimate puts the peak is the one the run's --memory-timeline records.
The model states agree with the published formulas (ZeRO, Megatron-LM, MindSpeed O2) at every stage.
estimate reads no data, writes nothing, and answers for llama2-70b in under a second.

Runs the binary memtrain_cli.py names.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import unittest

from memtrain_cli import CATEGORIES, MEMTRAIN, CliTestCase, memtrain, read_json, read_memory, run_flags

PRECISIONS = {
    "fp32": [],
    "bf16": ["--bf16"],
    "fp16": ["--fp16"],
    "bf16-o2opt": ["--bf16", "--o2-optimizer"],
    "bf16-o2grad": ["--bf16", "--o2-gradient"],
    "bf16-o2": ["--bf16", "--o2-optimizer", "--o2-gradient"],
    "bf16-nomaster": ["--bf16", "--o2-optimizer", "--o2-gradient", "--no-master-weights"],
}
RECOMPUTE = {
    "none": [],
    "selective": ["--recompute-granularity", "selective"],
    "full-uniform": ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"],
    "full-block": ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "1"],
}


def estimate(*flags):
    result = memtrain("estimate", *flags, "--json")
    if result.returncode != 0:
        raise AssertionError(f"estimate {' '.join(flags)}: exit {result.returncode}: {result.stderr}")
    return json.loads(result.stdout)


class EstimateEqualsTrainer(CliTestCase):
    def check(self, name, extra, ranks=1, model="gpt2-tiny", timeline=False):
        """Trains one step and compares every category of every rank with the estimate of the same flags."""
        flags = run_flags(*extra, model=model, train_iters=1)
        out = self.tmp / name
        result = self.train(*flags, *(["--memory-timeline"] if timeline else []), out=out, ranks=ranks)
        self.assertEqual(result.returncode, 0, f"{name}: {result.stdout}{result.stderr}")
        est = estimate(*flags, "--dp", str(ranks))
        self.assertEqual(len(est["ranks"]), ranks)
        for rank in range(ranks):
            memory = read_memory(out, None if ranks == 1 else rank)
            bytes_ = est["ranks"][rank]["bytes"]
            for c in CATEGORIES:
                self.assertEqual(bytes_[c], memory["planned"][c], f"{name} rank {rank} {c} planned")
                self.assertEqual(bytes_[c], memory["measured"][c], f"{name} rank {rank} {c} measured")
            self.assertEqual(est["ranks"][rank]["total_bytes"], memory["measured_total_bytes"])
            self.assertEqual(est["ranks"][rank]["activations_unpacked_bytes"], memory["activations_unpacked_bytes"])
            self.assertEqual(est["ranks"][rank]["offloaded_optimizer_file_bytes"],
                             memory["offloaded_optimizer_file_bytes"])
        if timeline:
            recorded = read_json(out / "memory_timeline.json")
            points = recorded["points"]
            peak = max(points, key=lambda p: sum(p["bytes"].values()))  # max() keeps the first of equals
            self.assertEqual(est["ranks"][0]["peak"]["op"], peak["op"], name)
            self.assertEqual(est["ranks"][0]["peak"]["name"], peak["name"], name)
            self.assertEqual(est["ranks"][0]["peak"]["bytes"], peak["bytes"], name)
        return est

    def test_one_process_matrix(self):
        # Every precision mode with every recompute mode, on GPT-2 and LLaMA, with the peak against the timeline.
        for model in ("gpt2-tiny", "llama-tiny"):
            for p, pflags in PRECISIONS.items():
                for r, rflags in RECOMPUTE.items():
                    with self.subTest(model=model, precision=p, recompute=r):
                        self.check(f"{model}-{p}-{r}", pflags + rflags, model=model, timeline=True)

    def test_one_process_batches_evaluation_checkpoints_offload(self):
        nvme = self.tmp / "nvme"
        nvme.mkdir()
        cases = {
            "accumulation": ["--global-batch-size", "6"],
            "evaluation": ["--eval-interval", "1", "--eval-iters", "1"],
            "checkpoints": ["--save", str(self.tmp / "saves"), "--bf16"],
            "offload": ["--offload-optimizer", "nvme", "--offload-path", str(nvme), "--offload-chunk-mb", "0.01"],
            "offload-o2": ["--bf16", "--o2-optimizer", "--offload-optimizer", "nvme", "--offload-path", str(nvme)],
        }
        for name, flags in cases.items():
            with self.subTest(case=name):
                self.check(name, flags)

    def test_lora(self):
        # A frozen base and adapters on every linear module: the frozen weights and the adapters' model states,
        # exact in every precision and recompute mode; then 2 ranks with ZeRO-1 (and 3) sharding the adapters.
        lora = ["--lora-rank", "4", "--lora-alpha", "8"]
        for model in ("gpt2-tiny", "llama-tiny"):
            for p in ("fp32", "bf16", "bf16-o2"):
                for r in ("none", "selective", "full-uniform"):
                    with self.subTest(model=model, precision=p, recompute=r):
                        est = self.check(f"lora-{model}-{p}-{r}", lora + PRECISIONS[p] + RECOMPUTE[r], model=model)
                        self.assertGreater(est["ranks"][0]["bytes"]["frozen"], 0)
                        self.assertLess(est["trainable_parameters"], est["padded_parameters"] / 10)
        with self.subTest(case="lora dropout: its workspace"):
            self.check("lora-dropout", lora + ["--lora-dropout", "0.1", "--bf16"], model="llama-tiny", timeline=True)
        # QLoRA: the quantized base's bytes and the products' dequantization tiles, with and without recompute,
        # and under ZeRO-3 (the frozen base is held whole by every rank).
        for quant in (["--base-quant", "nf4"], ["--base-quant", "int8", "--no-double-quant"]):
            for model in ("gpt2-tiny", "llama-tiny"):
                with self.subTest(model=model, quant=quant):
                    est = self.check(f"qlora-{model}-{quant[1]}", lora + quant + ["--bf16"], model=model,
                                     timeline=True)
                    dense = self.check(f"lora-{model}-bf16", lora + ["--bf16"], model=model)
                    self.assertLess(est["ranks"][0]["bytes"]["frozen"], dense["ranks"][0]["bytes"]["frozen"])
        self.check("qlora-recompute", lora + ["--base-quant", "nf4"] + RECOMPUTE["full-uniform"], model="llama-tiny")
        self.check("qlora-dp-3", lora + ["--base-quant", "nf4", "--zero-stage", "3", "--global-batch-size", "4"],
                   ranks=2, model="llama-tiny")
        for stage in ("1", "3"):
            with self.subTest(case=f"lora, 2 ranks, stage {stage}"):
                self.check(f"lora-dp-{stage}", lora + ["--zero-stage", stage, "--global-batch-size", "4", "--bf16"],
                           ranks=2, model="llama-tiny")

    def test_two_ranks_every_zero_stage(self):
        nvme = self.tmp / "nvme2"
        nvme.mkdir()
        for stage in ("0", "1", "2", "3"):
            for p in ("fp32", "bf16-o2grad"):
                with self.subTest(stage=stage, precision=p):
                    self.check(f"dp-{stage}-{p}", ["--zero-stage", stage, "--global-batch-size", "4"] + PRECISIONS[p],
                               ranks=2)
        with self.subTest(case="stage 3, full recompute, llama"):
            self.check("dp-3-llama", ["--zero-stage", "3", "--bf16"] + RECOMPUTE["full-uniform"], ranks=2,
                       model="llama-tiny")
        with self.subTest(case="stage 1, offload"):
            self.check("dp-1-offload", ["--zero-stage", "1", "--offload-optimizer", "nvme", "--offload-path",
                                        str(nvme)], ranks=2)


# Published model-state bytes per parameter as (weights, gradients, master weights, Adam moments), and the
# ZeRO stage from which d ranks each hold 1/d of the term.
SHARDED_FROM = {"params": 3, "grads": 2, "master": 1, "optim": 1}
FORMULAS = {
    # ZeRO paper, mixed-precision Adam: 2 + 2 + K with K = 12 (fp32 master, momentum, variance); stages 1-3.
    # Also MindSpeed O2's 16 (bf16 gradients; 4 + 12/d with the distributed optimizer).
    "zero-16": (["--bf16", "--o2-gradient"], {"params": 2, "grads": 2, "master": 4, "optim": 8}),
    # Megatron-LM bf16 with fp32 gradients: 18, and 6 + 12/d with the distributed optimizer (stage 1).
    "megatron-18": (["--bf16"], {"params": 2, "grads": 4, "master": 4, "optim": 8}),
    # MindSpeed O2: bf16 moments 14 (6 + 8/d), both 12 (4 + 8/d).
    "mindspeed-14": (["--bf16", "--o2-optimizer"], {"params": 2, "grads": 4, "master": 4, "optim": 4}),
    "mindspeed-12": (["--bf16", "--o2-optimizer", "--o2-gradient"], {"params": 2, "grads": 2, "master": 4, "optim": 4}),
}
PUBLISHED_TOTALS = {  # (stage 0, stage 1) as the sources print them
    "zero-16": ("16", "4 + 12/d"), "megatron-18": ("18", "6 + 12/d"),
    "mindspeed-14": ("14", "6 + 8/d"), "mindspeed-12": ("12", "4 + 8/d"),
}


class EstimateAgreesWithPublishedFormulas(unittest.TestCase):
    def test_model_states_per_parameter(self):
        for model, dps in (("llama2-7b", (1, 2, 8)), ("gpt2", (1, 3, 8))):
            for name, (flags, per_param) in FORMULAS.items():
                for d in dps:
                    for stage in ((0,) if d == 1 else (0, 1, 2, 3)):
                        with self.subTest(model=model, formula=name, d=d, stage=stage):
                            est = estimate("--model", model, "--seq-length", "16", "--micro-batch-size", "1",
                                           "--threads", "1", "--eval-interval", "0", "--dp", str(d),
                                           "--zero-stage", str(stage), "--explain", *flags)
                            n = est["padded_parameters"]
                            s = math.ceil(n / d)
                            for rank in est["ranks"]:
                                for c, coef in per_param.items():
                                    sharded = d > 1 and stage >= SHARDED_FROM[c]
                                    # Exactly the formula, but for the last shard's padding: coef x ceil(N/d).
                                    self.assertEqual(rank["bytes"][c], coef * (s if sharded else n), c)
                                    self.assertLessEqual(abs(rank["bytes"][c] - coef * (n / d if sharded else n)),
                                                         coef * d)
                                if n % d == 0:
                                    published = sum(coef / (d if d > 1 and stage >= SHARDED_FROM[c] else 1)
                                                    for c, coef in per_param.items())
                                    self.assertAlmostEqual(rank["model_state_bytes_per_param"], published, places=9)
                            explained = est["explain"]
                            self.assertTrue(explained)
                            for row in explained:
                                if stage <= 1:
                                    self.assertEqual(row["bytes_per_param"], PUBLISHED_TOTALS[name][stage if d > 1 else 0])
                                for term in row["terms"]:
                                    sharded = d > 1 and stage >= SHARDED_FROM[term["category"]]
                                    coef = per_param[term["category"]]
                                    self.assertAlmostEqual(term["formula_bytes"], coef * (n / d if sharded else n), delta=1e-3)
                                    self.assertEqual(term["why"] != "", term["planned_bytes"] != term["formula_bytes"])

    def test_eight_bit_moments_at_every_layout(self):
        """8-bit moments on every precision x gradients x master: weights, gradients and master as stored, the
        moments 1 byte each plus two fp32 scales per block (8/2048 int8, 8/128 fp8); a shard of ZeRO is
        ceil(N/d) rounded up to whole blocks, and an unsharded moment has a scale per block begun."""
        blocks = {"int8": 2048, "fp8": 128}
        layouts = {  # flags: (weights, gradients, master)
            "fp32": ([], (4, 4, 0)), "fp16": (["--fp16"], (2, 4, 4)), "bf16": (["--bf16"], (2, 4, 4)),
            "bf16-grads": (["--bf16", "--main-grads-dtype", "bf16"], (2, 2, 4)),
            "bf16-nomaster": (["--bf16", "--main-params-dtype", "none"], (2, 4, 0)),
            "bf16-grads-nomaster": (["--bf16", "--main-grads-dtype", "bf16", "--main-params-dtype", "none"], (2, 2, 0)),
        }
        for moments, block in blocks.items():
            for layout, (flags, (weights, grads, master)) in layouts.items():
                per_param = {"params": weights, "grads": grads, "optim": 2 + 8 / block}
                if master:
                    per_param["master"] = master
                for model, d, stages in (("gpt2", 1, (0,)), ("gpt2", 3, (1, 2, 3)), ("llama2-7b", 8, (1, 3))):
                    for stage in stages:
                        with self.subTest(moments=moments, layout=layout, model=model, d=d, stage=stage):
                            self.check_eight_bit(model, d, stage, block, per_param,
                                                 [*flags, "--exp-avg-dtype", moments, "--exp-avg-sq-dtype", moments])
        text = memtrain("estimate", "--model", "gpt2", "--seq-length", "16", "--micro-batch-size", "1", "--threads",
                        "1", "--bf16", "--main-grads-dtype", "bf16", "--exp-avg-dtype", "int8", "--exp-avg-sq-dtype",
                        "int8", "--explain").stdout
        self.assertIn("8-bit Adam (Dettmers et al. 2022): int8 moments, an fp32 absmax per block of 2048 of each, with "
                      "bf16 weights + fp32 master, bf16 gradients: 10 + 8/2048 bytes/parameter", text)
        self.assertIn("(2 + 8/2048) x N = ", text)

    def check_eight_bit(self, model, d, stage, block, per_param, flags):
        est = estimate("--model", model, "--seq-length", "16", "--micro-batch-size", "1", "--threads", "1",
                       "--eval-interval", "0", "--dp", str(d), "--zero-stage", str(stage), "--explain", *flags)
        n = est["padded_parameters"]
        s = math.ceil(math.ceil(n / d) / block) * block  # whole blocks per shard
        rank = est["ranks"][0]  # the largest: every shard is S elements
        for c, coef in per_param.items():
            if d > 1 and stage >= SHARDED_FROM[c]:
                self.assertEqual(rank["bytes"][c], coef * s, c)
            elif c == "optim":
                self.assertEqual(rank["bytes"][c], 2 * n + 8 * math.ceil(n / block), c)
            else:
                self.assertEqual(rank["bytes"][c], coef * n, c)
        (row,) = est["explain"]
        self.assertEqual({t["category"] for t in row["terms"]}, set(per_param))
        # As published: the bytes kept whole, plus those divided among d ranks, the scales as 8/block.
        shared = {c: d > 1 and stage >= SHARDED_FROM[c] for c in per_param}
        whole = sum(round(coef) for c, coef in per_param.items() if not shared[c])
        divided = sum(round(coef) for c, coef in per_param.items() if shared[c])
        scales = f" + 8/{block}"
        kept = f"{whole}" + ("" if shared["optim"] else scales)
        parts = (kept if whole else None, (f"({divided}{scales})/d" if shared["optim"] else f"{divided}/d") if divided else None)
        self.assertEqual(row["bytes_per_param"], " + ".join(p for p in parts if p))
        for term in row["terms"]:
            sharded = d > 1 and stage >= SHARDED_FROM[term["category"]]
            coef = per_param[term["category"]]
            self.assertAlmostEqual(term["formula_bytes"], coef * (n / d if sharded else n), delta=1e-3)
            self.assertEqual(term["why"] != "", term["planned_bytes"] != term["formula_bytes"])
            if term["planned_bytes"] != term["formula_bytes"]:
                self.assertIn(f"rounded up to whole blocks of {block}" if sharded else "a scale per block begun",
                              term["why"])

    def test_no_formula_for_fp32_or_without_master(self):
        for flags in ([], ["--bf16", "--o2-optimizer", "--o2-gradient", "--no-master-weights"]):
            est = estimate("--model", "gpt2", "--seq-length", "16", "--micro-batch-size", "1", "--threads", "1",
                           "--explain", *flags)
            self.assertEqual(est["explain"], [])


class ModelParallel(unittest.TestCase):
    """Tensor and pipeline parallelism's estimate is every world rank's own plan, as the engine runs it: a
    tensor-parallel rank's split tables, a pipeline stage's layers with all the step's micro-batches in 1F1B
    order."""

    def test_tensor_parallel_splits_the_linears_and_the_vocabulary(self):
        # llama2-7b: q/k/v, o, gate/up, down and the embedding and untied head split over 8 ranks; the norms not.
        L, C, I, V = 32, 4096, 11008, 32000
        split = L * (3 * C * C + C * C + 2 * I * C + I * C) + 2 * V * C
        replicated = L * 2 * C + C
        est = estimate("--model", "llama2-7b", "--bf16", "--tp", "8", "--seq-length", "128", "--micro-batch-size", "1",
                       "--threads", "1")
        self.assertEqual(len(est["ranks"]), 8)
        self.assertEqual(est["ranks"][0]["num_params"], split // 8 + replicated)
        self.assertEqual(est["ranks"][0]["bytes"]["params"], 2 * (split // 8 + replicated))
        # gpt2 (tied head) over 4: c_attn and c_fc with their biases, both c_proj weights, wte; the rest whole.
        L, C, T, Vp = 12, 768, 1024, 50304
        split = L * (C * 3 * C + 3 * C + C * C + C * 4 * C + 4 * C + 4 * C * C) + Vp * C
        replicated = L * (4 * C + C + C) + T * C + 2 * C
        est = estimate("--model", "gpt2", "--tp", "4", "--seq-length", "128", "--micro-batch-size", "1", "--threads", "1")
        self.assertEqual(est["ranks"][0]["num_params"], split // 4 + replicated)

    def test_pipeline_stages_split_the_layers_and_hold_1f1b_micro_batches(self):
        L, C, T, Vp = 12, 768, 1024, 50304
        flags = ["--model", "gpt2", "--seq-length", "64", "--micro-batch-size", "1", "--threads", "1"]
        for micro_batches, in_flight in ((8, [4, 3, 2, 1]), (2, [2, 2, 2, 1])):
            est = estimate(*flags, "--pp", "4", "--global-batch-size", str(micro_batches))
            stages = est["ranks"]
            self.assertEqual([r["stage"] for r in stages], [0, 1, 2, 3])
            self.assertEqual([r["in_flight_micro_batches"] for r in stages], in_flight)
            self.assertAlmostEqual(est["pipeline_bubble_fraction"], 3 / (micro_batches + 3))
            # Every layer on one stage; the last stage keeps its own copy of the tied embedding for the head.
            self.assertEqual(sum(r["num_params"] for r in stages), est["padded_parameters"] + Vp * C)
            layer = (est["padded_parameters"] - Vp * C - T * C - 2 * C) // L
            self.assertEqual(stages[1]["num_params"], 3 * layer)
            self.assertEqual(stages[0]["num_params"], Vp * C + T * C + 3 * layer)
            self.assertEqual(stages[3]["num_params"], 3 * layer + 2 * C + Vp * C)
            # The packed plan holds the saved activations of the micro-batches in flight at once, and less than
            # those of one more: 1F1B's memory, from the stage's own lifetimes.
            for r in stages[:-1]:
                saved, held = r["saved_activation_bytes_per_micro_batch"], r["bytes"]["activations"]
                self.assertGreaterEqual(held, r["in_flight_micro_batches"] * saved, r["stage"])
                self.assertLess(held, (r["in_flight_micro_batches"] + 1) * saved, r["stage"])
            self.assertGreater(stages[0]["bytes"]["activations"], stages[3]["bytes"]["activations"])
            # train's flag, as a `train` command line gives it, is the same layout.
            self.assertEqual(estimate(*flags, "--pipeline-model-parallel-size", "4", "--global-batch-size",
                                      str(micro_batches))["ranks"], stages)

    def test_activations_per_layer_follow_megatrons_formula(self):
        # Korthikanti et al. 2022 (Megatron's activation memory): a layer keeps sbh(10 + 24/t) bytes with 16-bit
        # activations and flash attention (no 5as/h score term), 2sbh of which are dropout masks. Without dropout
        # our layer keeps sbh(8 + 24/t), plus what that count leaves out: LayerNorm statistics (mean and rstd
        # of both norms, fp32: 16sb) and attention's log-sum-exp per head and row (fp32, split: 4asb/t).
        # With sequence parallelism (sbh(10/t + 24/t)) the layer's input, its norms' outputs and statistics and
        # the attention's residual are kept for s/t tokens too. One layer per stage (P = L): a middle stage's
        # plan, as the engine runs it, keeps that much of the first micro-batch from its forward to its
        # backward, on every tensor-parallel rank, and holds that of the 6 micro-batches 1F1B keeps in flight.
        s, b, h, a, L = 1024, 1, 768, 12, 12
        for t in (1, 2, 4):
            for sequence_parallel in ([], ["--sequence-parallel"]) if t > 1 else ([],):
                est = estimate("--model", "gpt2", "--bf16", "--pp", str(L), "--tp", str(t), *sequence_parallel,
                               "--seq-length", str(s), "--micro-batch-size", str(b), "--global-batch-size", str(L),
                               "--threads", "1")
                middle = [r for r in est["ranks"] if r["stage"] == L // 2]
                self.assertEqual([r["tp_rank"] for r in middle], list(range(t)))
                split = t if sequence_parallel else 1
                layer = s * b * h * (8 // split + 24 // t) + 16 * s * b // split + 4 * a * s * b // t
                for r in middle:
                    self.assertEqual(r["saved_activation_bytes_per_micro_batch"], layer)
                    self.assertEqual(r["in_flight_micro_batches"], L // 2)
                    self.assertGreaterEqual(r["bytes"]["activations"], L // 2 * layer)
                    self.assertLess(r["bytes"]["activations"], (L // 2 + 1) * layer)

    def test_every_world_rank_in_megatrons_order(self):
        # World rank = (stage x D + data-parallel rank) x T + tensor-parallel rank; ZeRO-1 shards each stage's
        # own parameters over its data-parallel group.
        est = estimate("--model", "llama-tiny", "--dp", "2", "--zero-stage", "1", "--tp", "2", "--pp", "2",
                       "--seq-length", "32", "--micro-batch-size", "1", "--global-batch-size", "4", "--threads", "1")
        self.assertEqual([(r["rank"], r["stage"], r["dp_rank"], r["tp_rank"]) for r in est["ranks"]],
                         [(r, r // 4, r // 2 % 2, r % 2) for r in range(8)])
        for r in est["ranks"]:
            self.assertEqual(r["shard"][1] - r["shard"][0], -(-r["num_params"] // 2))
        self.assertEqual(est["micro_batches_per_step"], 2)
        self.assertNotIn("modelled", json.dumps(est).lower())
        text = memtrain("estimate", "--model", "llama-tiny", "--tp", "2", "--pp", "2", "--seq-length", "32",
                        "--micro-batch-size", "1", "--global-batch-size", "4", "--threads", "1")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertNotIn("modelled", text.stdout.lower())
        self.assertIn("as `train --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2` runs it", text.stdout)
        self.assertIn("ranks 2-3 (each), pipeline stage 1 of 2", text.stdout)

    def test_bad_layouts_name_their_flags(self):
        for flags, mentions in ((["--tp", "5"], ["--tensor-model-parallel-size 5"]),
                                (["--pp", "5"], ["--pipeline-model-parallel-size 5", "12 layers"]),
                                (["--pp", "2", "--pipeline-model-parallel-size", "4"],
                                 ["--pp 2", "--pipeline-model-parallel-size 4"]),
                                (["--pp", "0"], ["--pp"]),
                                (["--pp", "2", "--dp", "2", "--zero-stage", "2"],
                                 ["--pipeline-model-parallel-size 2", "--zero-stage 2"])):
            with self.subTest(flags=flags):
                result = memtrain("estimate", "--model", "gpt2", "--seq-length", "64", *flags)
                self.assertEqual(result.returncode, 2, result.stderr)
                for mention in mentions:
                    self.assertIn(mention, result.stderr)


class EstimateCommand(unittest.TestCase):
    @unittest.skipIf(os.environ.get("MEMTRAIN_SANITIZED") == "1", "sanitizer builds are neither fast nor small")
    def test_llama2_70b_fast_and_small(self):
        flags = ["--model", "llama2-70b", "--bf16", "--o2-optimizer", "--dp", "8", "--zero-stage", "1",
                 "--seq-length", "4096", "--micro-batch-size", "1", "--recompute-granularity", "full",
                 "--device-memory", "80GiB", "--json"]
        start = time.monotonic()
        result = memtrain("estimate", *flags, timeout=60)
        elapsed = time.monotonic() - start
        self.assertEqual(result.returncode, 0, result.stderr)
        est = json.loads(result.stdout)
        self.assertEqual(est["parameters"], 68976648192)  # llama2-70b's published count
        self.assertEqual(len(est["ranks"]), 8)
        self.assertLess(elapsed, 1.0)
        # The peak resident set of that one process, read by a parent of its own.
        measure = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
                   "check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        rss_kib = int(subprocess.run([sys.executable, "-c", measure, MEMTRAIN, "estimate", *flags],
                                     capture_output=True, text=True, check=True, timeout=60).stdout)
        self.assertLess(rss_kib, 64 * 1024)

    def test_no_data_and_no_files(self):
        with tempfile.TemporaryDirectory(prefix="memtrain-estimate-cwd-") as cwd:
            result = memtrain("estimate", "--model", "gpt2", "--seq-length", "64", "--device-memory", "24GB", cwd=cwd)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("fits in 22.35 GiB", result.stdout)  # 24e9 bytes, exactly
            self.assertEqual(os.listdir(cwd), [])

    def test_cpu_isa_plans_for_a_level(self):
        """bf16 products below AVX512-BF16 hold the fp32 conversion tiles that f16 products hold at every level, as
        workspace, and nothing else changes; the level is in the header and the JSON, by default this process's."""
        flags = ["--model", "gpt2-tiny", "--seq-length", "64", "--threads", "1"]
        avx2 = estimate(*flags, "--bf16", "--cpu-isa", "avx2")
        native = estimate(*flags, "--bf16", "--cpu-isa", "avx512_bf16")
        f16 = estimate(*flags, "--fp16", "--cpu-isa", "avx512_bf16")
        self.assertEqual((avx2["cpu_isa"], native["cpu_isa"]), ("avx2", "avx512_bf16"))
        tiles = f16["ranks"][0]["bytes"]["workspace"] - native["ranks"][0]["bytes"]["workspace"]
        self.assertGreater(tiles, 0)
        for c in CATEGORIES:
            self.assertEqual(avx2["ranks"][0]["bytes"][c] - native["ranks"][0]["bytes"][c],
                             tiles if c == "workspace" else 0, c)
        text = memtrain("estimate", *flags, "--cpu-isa", "avx2")
        self.assertIn("kernels sized for 1 thread per rank at avx2\n", text.stdout)
        # Without the flag: this process's level, which MEMTRAIN_MAX_ISA=generic caps to generic on any CPU.
        capped = memtrain("estimate", *flags, "--bf16", "--json", env={"MEMTRAIN_MAX_ISA": "generic"})
        self.assertEqual(capped.returncode, 0, capped.stderr)
        self.assertEqual(json.loads(capped.stdout)["cpu_isa"], "generic")
        self.assertEqual(json.loads(capped.stdout)["ranks"], avx2["ranks"])

    def test_bad_cpu_isa_is_a_usage_error(self):
        result = memtrain("estimate", "--model", "gpt2", "--cpu-isa", "avx3")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--cpu-isa avx3", result.stderr)
        self.assertIn("generic, avx2, avx512 or avx512_bf16", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)

    def test_bad_device_memory_is_a_usage_error(self):
        result = memtrain("estimate", "--model", "gpt2", "--device-memory", "80 gigs")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--device-memory", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
