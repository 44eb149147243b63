"""End-to-end tests of the memtrain command line.

The contract: every bad input ends the run with ONE line on stderr, `memtrain: error: ...`, naming the flag or
file and what was expected; exit code 2 for flags and model configuration, 1 for data and files (shards,
weights); never a crash, and no memory.json in --out after a failed run. A tiny run succeeds and writes
metrics.jsonl and memory.json, and weights it saves load back.

Runs the binary memtrain_cli.py names.
"""

import json
import math
import os
import struct
import unittest
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from memtrain_cli import (CATEGORIES, TINY_POSITIONS, TINY_RUN, TINY_VOCAB, CliTestCase, memtrain, read_json,
                          read_memory, read_metrics, read_safetensors, sample_text, train, write_safetensors,
                          write_shard)

BATCH, SEQ = TINY_RUN["micro_batch_size"], TINY_RUN["seq_length"]


class BadFlags(CliTestCase):
    def test_unknown_flag(self):
        self.assert_train_fails(2, "--no-such-flag", no_such_flag=True)

    def test_missing_required_flag(self):
        self.assert_train_fails(2, "--train-iters", train_iters=None)

    def test_unknown_isa_cap(self):
        # Every command reads the level (plan's and estimate's defaults too), so every one refuses it.
        for command in (["estimate", "--model", "gpt2-tiny"], ["plan", "--model", "gpt2-tiny", "--device-memory",
                                                               "1GiB", "--global-batch-size", "8"]):
            result = memtrain(*command, env={"MEMTRAIN_MAX_ISA": "avx"})
            self.assert_error(result, 2, "MEMTRAIN_MAX_ISA", "avx2")

    def test_seq_length_above_model_positions(self):
        self.assert_train_fails(2, "--seq-length", seq_length=TINY_POSITIONS + 1)


class BadModel(CliTestCase):
    def write_config(self, text: str) -> Path:
        path = self.tmp / "config.json"
        path.write_text(text)
        return path

    def test_embedding_not_divisible_by_heads(self):
        config = {"n_layer": 2, "n_head": 4, "n_embd": 66, "n_positions": 128, "vocab_size": 256}
        path = self.write_config(json.dumps(config))
        self.assert_train_fails(2, path, "n_head", model=path)

    def test_unknown_preset(self):
        self.assert_train_fails(2, "gpt2-huge", model="gpt2-huge")

    def test_malformed_json(self):
        path = self.write_config('{\n  "n_layer": 2,\n  "n_head": 4\n  "n_embd": 64\n}\n')
        self.assert_train_fails(2, path, model=path)


class BadShards(CliTestCase):
    def train_shard(self, tokens, **header) -> Path:
        """A data folder holding one train shard; returns the shard's path."""
        folder = self.tmp / "data"
        folder.mkdir()
        path = folder / "bad_train_000000.bin"
        write_shard(path, tokens, **header)
        return path

    def good_tokens(self):
        return [ord(c) for c in sample_text(100)]

    def test_wrong_magic(self):
        shard = self.train_shard(self.good_tokens(), magic=20240521)
        self.assert_train_fails(1, shard, data=shard.parent)

    def test_wrong_version(self):
        shard = self.train_shard(self.good_tokens(), version=3)
        self.assert_train_fails(1, shard, data=shard.parent)

    def test_truncated_body(self):
        shard = self.train_shard(self.good_tokens())
        shard.write_bytes(shard.read_bytes()[:-7])
        self.assert_train_fails(1, shard, data=shard.parent)

    def test_token_not_below_vocabulary(self):
        tokens = self.good_tokens()
        tokens[len(tokens) // 2] = TINY_VOCAB
        shard = self.train_shard(tokens)
        self.assert_train_fails(1, shard, data=shard.parent)

    def test_folder_without_shards(self):
        folder = self.tmp / "empty"
        folder.mkdir()
        self.assert_train_fails(1, folder, data=folder)


class BadWeights(CliTestCase):
    good_weights: dict  # tensors of a real saved run, edited by each test

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        weights = Path(cls.class_tmp.name) / "good.safetensors"
        result = train(data=cls.data, train_iters=1, save_weights=weights, out=Path(cls.class_tmp.name) / "good")
        assert result.returncode == 0, f"saving weights failed ({result.returncode}): {result.stderr}"
        cls.good_weights = read_safetensors(weights)

    def weights_file(self, tensors: dict) -> Path:
        path = self.tmp / "weights.safetensors"
        write_safetensors(path, tensors)
        return path

    def test_good_weights_load(self):
        """The edits below are what fail, not the way this test writes safetensors."""
        result = self.train(init_from=self.weights_file(self.good_weights))
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_broken_header(self):
        path = self.tmp / "weights.safetensors"
        text = b'{"wte.weight": {"dtype": "F32", "shape": [256, 64'
        path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(64))
        self.assert_train_fails(1, path, init_from=path)

    def test_missing_tensor(self):
        tensors = dict(self.good_weights)
        del tensors["ln_f.bias"]
        path = self.weights_file(tensors)
        self.assert_train_fails(1, path, "ln_f.bias", init_from=path)

    def test_wrong_shape(self):
        tensors = dict(self.good_weights)
        shape, raw = tensors["wpe.weight"]
        tensors["wpe.weight"] = (list(reversed(shape)), raw)  # same bytes, transposed shape
        path = self.weights_file(tensors)
        self.assert_train_fails(1, path, "wpe.weight", init_from=path)


class GoodRuns(CliTestCase):
    def test_tiny_run_writes_metrics_and_memory(self):
        out = self.tmp / "run"
        result = self.train(train_iters=3, eval_interval=2, eval_iters=1, out=out)
        self.assertEqual(result.returncode, 0, result.stderr)

        records = read_metrics(out)
        self.assertEqual([r["step"] for r in records], [1, 2, 3])
        memory = read_memory(out)
        # The kernels' level: the CPU's own, or MEMTRAIN_MAX_ISA's cap below it, the same in both files.
        levels = ["generic", "avx2", "avx512", "avx512_bf16"]
        self.assertIn(memory["cpu_isa"], levels)
        cap = os.environ.get("MEMTRAIN_MAX_ISA")
        if cap:
            self.assertLessEqual(levels.index(memory["cpu_isa"]), levels.index(cap))
        for record in records:
            evaluated = record["step"] in (2, 3)  # every 2 steps, and the last
            expected = {"step", "loss", "lr", "grad_norm", "tokens_per_sec", "step_ms", "cpu_isa"}
            self.assertEqual(set(record), expected | ({"val_loss"} if evaluated else set()), record)
            self.assertEqual(record.pop("cpu_isa"), memory["cpu_isa"])
            self.assertTrue(all(math.isfinite(record[k]) for k in record), record)

        self.assertTrue(memory["planned"], memory)
        self.assertEqual(memory["planned"], memory["measured"])
        # The host's own buffers (the loader's window) are planned and measured in host memory.
        self.assertGreater(memory["planned_host"]["other"], 0, memory)
        self.assertEqual(memory["planned_host"], memory["measured_host"])

    def test_saved_weights_load_back(self):
        """Run A trains and saves; run B starts from the file at --lr 0. With one window of data every step
        and the validation pass see the same batch, so B's losses repeat and equal A's last validation loss."""
        data = self.tmp / "one-window"
        data.mkdir()
        tokens = [ord(c) for c in sample_text(100)][: BATCH * SEQ + 1]
        write_shard(data / "w_train_000000.bin", tokens)
        write_shard(data / "w_val_000000.bin", tokens)
        weights = self.tmp / "a.safetensors"

        run_a = self.train(data=data, train_iters=3, eval_interval=3, eval_iters=1, save_weights=weights,
                           out=self.tmp / "a")
        self.assertEqual(run_a.returncode, 0, run_a.stderr)
        run_b = self.train(data=data, init_from=weights, lr=0, out=self.tmp / "b")
        self.assertEqual(run_b.returncode, 0, run_b.stderr)

        a_val_loss = read_metrics(self.tmp / "a")[-1]["val_loss"]
        b_step1, b_step2 = (r["loss"] for r in read_metrics(self.tmp / "b"))
        self.assertEqual(b_step1, b_step2, "weights changed at --lr 0")
        self.assertAlmostEqual(b_step1, a_val_loss, places=5, msg="loaded weights differ from the saved ones")


class DeviceFlag(CliTestCase):
    def test_cuda_without_a_gpu_is_refused_in_one_line(self):
        # A build without CUDA says so; one with it, on a machine without a GPU, that it found none (or not
        # that one); neither falls back to the CPU, and nothing is written. Planning for a GPU needs none
        # (test_gpu_plan.py).
        built = memtrain("estimate", "--model", "gpt2-tiny", "--device", "cuda")
        for device in ("cuda", "cuda:1"):
            result = self.train(out=self.tmp / device, device=device)
            if built.returncode == 0 and "no GPU found" not in result.stderr and device == "cuda":
                self.skipTest("this machine has a GPU: tests/cli/test_cuda.py trains on it")
            why = "built without CUDA" if built.returncode != 0 else "no GPU"
            self.assert_error(result, 2, f"--device {device}", why)
            self.assertFalse((self.tmp / device / "memory.json").exists())

    def test_calibrate_cuda_without_a_gpu_is_refused_in_one_line(self):
        # As train: a build without CUDA says so, one with it that it found no GPU; no profile is written.
        built = memtrain("estimate", "--model", "gpt2-tiny", "--device", "cuda")
        out = self.tmp / "gpu.json"
        result = memtrain("calibrate", "--device", "cuda", "--out", out)
        if result.returncode == 0:
            self.skipTest("this machine has a GPU: tests/cli/test_gpu_plan_search.py reads its profile")
        self.assert_error(result, 2, "--device cuda", "built without CUDA" if built.returncode != 0 else "no GPU")
        self.assertFalse(out.exists())

    def test_unknown_device(self):
        for device in ("tpu", "cuda:", "cuda:x", "cuda0"):
            self.assert_train_fails(2, f"--device {device}", "expected cpu, cuda or cuda:N", device=device)

    def test_cpu_by_name_is_the_default(self):
        named, default = self.tmp / "named", self.tmp / "default"
        self.train(out=named, device="cpu", expect=0)
        self.train(out=default, expect=0)
        self.assertEqual([r["loss"] for r in read_metrics(named)], [r["loss"] for r in read_metrics(default)])
        self.assertEqual(read_memory(named)["planned"], read_memory(default)["planned"])


class PrecisionFlags(CliTestCase):
    def test_bf16_and_fp16_exclude_each_other(self):
        self.assert_train_fails(2, "--bf16", "--fp16", bf16=True, fp16=True)

    def test_precision_contradicting_alias(self):
        self.assert_train_fails(2, "--precision fp32", "--bf16", precision="fp32", bf16=True)

    def test_unknown_precision(self):
        self.assert_train_fails(2, "--precision fp8", precision="fp8")

    def test_o2_flags_need_bf16(self):
        self.assert_train_fails(2, "--o2-optimizer", "--bf16", o2_optimizer=True)
        self.assert_train_fails(2, "--o2-gradient", "--bf16", o2_gradient=True, fp16=True)
        self.assert_train_fails(2, "--no-master-weights", "--bf16", no_master_weights=True)

    def test_loss_scale_needs_fp16(self):
        self.assert_train_fails(2, "--loss-scale", "--fp16", loss_scale=128, bf16=True)

    def test_global_batch_not_divisible_by_micro_batch(self):
        self.assert_train_fails(2, "--global-batch-size 3", "--micro-batch-size 2", global_batch_size=3)

    def test_global_batch_disagreeing_with_accumulation_steps(self):
        self.assert_train_fails(2, "--grad-accum-steps 3", global_batch_size=4, grad_accum_steps=3)


class PrecisionRuns(CliTestCase):
    MODES = {  # flags -> model-state bytes per parameter
        "fp32": ({}, 16),
        "bf16": ({"bf16": True}, 18),
        "fp16": ({"fp16": True}, 18),
        "bf16 O2 optimizer": ({"bf16": True, "o2_optimizer": True}, 14),
        "bf16 O2 gradient": ({"bf16": True, "o2_gradient": True}, 16),
        "bf16 O2 both": ({"bf16": True, "o2_optimizer": True, "o2_gradient": True}, 12),
        "bf16 O2 both, no master": (
            {"bf16": True, "o2_optimizer": True, "o2_gradient": True, "no_master_weights": True}, 8),
    }

    def test_every_mode_plans_and_measures_its_bytes_per_parameter(self):
        for name, (flags, per_param) in self.MODES.items():
            with self.subTest(name):
                out = self.tmp / name.replace(" ", "_").replace(",", "")
                result = self.train(out=out, train_iters=2, **flags)
                self.assertEqual(result.returncode, 0, result.stderr)
                memory = read_memory(out)
                self.assertEqual(memory["planned"], memory["measured"])
                self.assertEqual(memory["model_state_bytes_per_param"], {"planned": per_param, "measured": per_param})
                self.assertTrue(all(math.isfinite(r["loss"]) for r in read_metrics(out)))

    def test_fp16_overflow_skips_the_step_and_backs_off(self):
        """A loss scale of 2^40 overflows fp16 gradients: each step is skipped and halves the scale (hysteresis
        1) until the gradients fit, after which steps are taken and the scale holds."""
        out = self.tmp / "run"
        result = self.train(out=out, fp16=True, initial_loss_scale=2.0**40, hysteresis=1, train_iters=40)
        self.assertEqual(result.returncode, 0, result.stderr)
        records = read_metrics(out)
        skipped = [r["step"] for r in records if r["skipped"]]
        self.assertGreater(len(skipped), 0, "no overflow at a scale of 2^40")
        self.assertEqual(skipped, list(range(1, len(skipped) + 1)), "overflows must come first, then stop")
        for r in records:
            if r["skipped"]:
                self.assertEqual(r["loss_scale"], 2.0 ** (40 - r["step"]), r)
                self.assertIsNone(r["grad_norm"], r)
            else:
                self.assertEqual(r["loss_scale"], 2.0 ** (40 - len(skipped)), r)
                self.assertTrue(math.isfinite(r["grad_norm"]), r)

    def test_fp16_hysteresis_tolerates_overflows_before_backing_off(self):
        out = self.tmp / "run"
        result = self.train(out=out, fp16=True, initial_loss_scale=2.0**40, hysteresis=3, train_iters=4)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([r["loss_scale"] for r in read_metrics(out)], [2.0**40, 2.0**40, 2.0**39, 2.0**38])

    def test_fp16_scale_grows_after_each_clean_window(self):
        out = self.tmp / "run"
        result = self.train(out=out, fp16=True, initial_loss_scale=1, loss_scale_window=2, train_iters=6)
        self.assertEqual(result.returncode, 0, result.stderr)
        records = read_metrics(out)
        self.assertFalse(any(r["skipped"] for r in records))
        self.assertEqual([r["loss_scale"] for r in records], [1, 2, 2, 4, 4, 8])

    def test_static_loss_scale_never_changes(self):
        out = self.tmp / "run"
        result = self.train(out=out, fp16=True, loss_scale=1024, loss_scale_window=1, train_iters=3)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([r["loss_scale"] for r in read_metrics(out)], [1024, 1024, 1024])

    def test_accumulated_micro_batches_follow_the_large_batch(self):
        """Unshuffled, two micro-batches of 2 read the rows one batch of 4 reads: the losses agree."""
        big = self.train(out=self.tmp / "big", micro_batch_size=4, no_shuffle=True, train_iters=3)
        self.assertEqual(big.returncode, 0, big.stderr)
        accumulated = self.train(out=self.tmp / "acc", micro_batch_size=2, global_batch_size=4, no_shuffle=True,
                                 train_iters=3)
        self.assertEqual(accumulated.returncode, 0, accumulated.stderr)
        for a, b in zip(read_metrics(self.tmp / "acc"), read_metrics(self.tmp / "big")):
            self.assertAlmostEqual(a["loss"], b["loss"], delta=1e-5 * b["loss"])
            self.assertAlmostEqual(a["grad_norm"], b["grad_norm"], delta=1e-4 * b["grad_norm"])

    def test_bf16_weights_save_as_bf16_without_master_and_load_back(self):
        weights = self.tmp / "w.safetensors"
        flags = {"bf16": True, "o2_optimizer": True, "o2_gradient": True, "no_master_weights": True}
        result = self.train(save_weights=weights, **flags)
        self.assertEqual(result.returncode, 0, result.stderr)
        header = json.loads(weights.read_bytes()[8 : 8 + struct.unpack_from("<Q", weights.read_bytes())[0]])
        self.assertEqual({e["dtype"] for n, e in header.items() if n != "__metadata__"}, {"BF16"})
        for more in ({}, {"bf16": True}):  # into fp32 weights and into a bf16 run's fp32 master
            loaded = self.train(init_from=weights, out=self.tmp / f"load{len(more)}", **more)
            self.assertEqual(loaded.returncode, 0, loaded.stderr)


class Recompute(CliTestCase):
    MODES = {  # flags, and whether the activation arena shrinks on gpt2-tiny's 2 layers
        "selective": ({"recompute_granularity": "selective"}, True),
        "activations": ({"recompute_activations": True}, True),
        "full uniform 1": ({"recompute_granularity": "full"}, True),
        # One group of both layers: the backward reruns the whole forward, so the peak stays where it was.
        "full uniform 2": (
            {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 2}, False),
        "full block 1": (
            {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1}, True),
    }

    def test_every_mode_repeats_the_loss_curve_bitwise_in_less_memory(self):
        base = self.train(out=self.tmp / "none", train_iters=4)
        self.assertEqual(base.returncode, 0, base.stderr)
        base_losses = [r["loss"] for r in read_metrics(self.tmp / "none")]
        base_memory = read_memory(self.tmp / "none")
        for name, (flags, saves) in self.MODES.items():
            with self.subTest(name):
                out = self.tmp / name.replace(" ", "_")
                result = self.train(out=out, train_iters=4, **flags)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual([r["loss"] for r in read_metrics(out)], base_losses)
                memory = read_memory(out)
                self.assertEqual(memory["planned"], memory["measured"])
                activations, base_activations = memory["planned"]["activations"], base_memory["planned"]["activations"]
                (self.assertLess if saves else self.assertEqual)(activations, base_activations)

    def test_flag_rules(self):
        self.assert_train_fails(2, "--recompute-granularity", recompute_granularity="most")
        self.assert_train_fails(2, "--recompute-method", recompute_granularity="selective", recompute_method="block")
        self.assert_train_fails(2, "--recompute-num-layers", recompute_num_layers=2)
        self.assert_train_fails(2, "--recompute-num-layers 3", recompute_granularity="full", recompute_num_layers=3)


class MemoryTimeline(CliTestCase):
    TITLES = ["parameters", "gradients", "optimizer states", "activations", "workspace"]  # those holding bytes

    def train_with_timeline(self, out: Path, **flags) -> dict:
        result = self.train(out=out, train_iters=3, eval_interval=2, eval_iters=1, memory_timeline=True, **flags)
        self.assertEqual(result.returncode, 0, result.stderr)
        return read_json(out / "memory_timeline.json")

    def test_timeline_has_one_point_per_op(self):
        out = self.tmp / "run"
        timeline = self.train_with_timeline(out)
        points = timeline["points"]
        self.assertEqual([p["op"] for p in points], list(range(len(points))))
        names = [p["name"] for p in points]
        self.assertEqual(len(set(names)), len(names), "an op recorded twice")
        self.assertEqual((names[0], names[timeline["loss_op"]], names[-1]), ("embed", "lm_head", "embed.backward"))

        planned = read_memory(out)["planned"]
        self.assertEqual(timeline["planned"], planned)
        for point in points:
            self.assertEqual(list(point["bytes"]), CATEGORIES, point)
            for constant in ("params", "master", "grads", "optim", "other"):
                self.assertEqual(point["bytes"][constant], planned[constant], point)
            self.assertLessEqual(point["bytes"]["activations"], planned["activations"], point)
            self.assertLessEqual(point["bytes"]["workspace"], planned["workspace"], point)
        self.assertGreater(max(p["bytes"]["activations"] for p in points), 0)

    def test_named_file_gets_csv_and_the_run_keeps_json(self):
        out, csv_path = self.tmp / "run", self.tmp / "timeline.csv"
        result = self.train(out=out, memory_timeline=csv_path)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = csv_path.read_text().splitlines()
        self.assertEqual(rows[0], "op,name," + ",".join(CATEGORIES) + ",total")
        points = read_json(out / "memory_timeline.json")["points"]
        self.assertEqual(len(rows), len(points) + 1)

    def test_memory_report_lists_ten_largest_activations(self):
        result = self.train(memory_report=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = result.stdout.splitlines()
        title = next(i for i, line in enumerate(lines) if line.startswith("largest activations: 10 of "))
        rows = lines[title + 2 : title + 12]
        units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
        sizes = []
        for row in rows:
            _dtype, value, unit = row.split("]")[1].split()[:3]  # after the shape: dtype, then bytes
            sizes.append(float(value) * units[unit])
        self.assertEqual(sizes, sorted(sizes, reverse=True), "\n".join(rows))
        self.assertFalse(lines[title + 12].startswith("  "), "more than ten rows")

    def test_report_draws_timeline_and_loss(self):
        out = self.tmp / "run"
        timeline = self.train_with_timeline(out)
        result = memtrain("report", out)
        self.assertEqual(result.returncode, 0, result.stderr)
        root = ElementTree.parse(out / "report.svg").getroot()
        self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
        texts = {element.text for element in root.iter("{http://www.w3.org/2000/svg}text")}
        for title in self.TITLES:
            self.assertIn(title, texts)
        self.assertIn("loss", texts)
        peak = max(timeline["points"], key=lambda p: sum(p["bytes"].values()))
        self.assertTrue(any(t and t.endswith("during " + peak["name"]) for t in texts), texts)

        picture = self.tmp / "picture.svg"
        result = memtrain("report", out, "--out", picture)
        self.assertEqual(result.returncode, 0, result.stderr)
        ElementTree.parse(picture)

    def test_report_errors(self):
        self.assert_error(memtrain("report", self.tmp / "no-such-run"), 1, "no-such-run")
        out = self.tmp / "run"
        result = self.train(out=out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_error(memtrain("report", out), 1, out / "memory_timeline.json", "--memory-timeline")
        (out / "memory_timeline.json").write_text('{"run": "torn", "points": [')
        self.assert_error(memtrain("report", out), 1, out / "memory_timeline.json")
        self.assert_error(memtrain("report", out, "--out", self.tmp / "picture.png"), 2, "svg")

    def test_report_of_several_runs_overlays_their_losses(self):
        runs = [self.tmp / "fp32", self.tmp / "int8"]
        self.train(out=runs[0], train_iters=3, eval_interval=2, eval_iters=1, expect=0)
        self.train(out=runs[1], train_iters=3, eval_interval=2, eval_iters=1, exp_avg_dtype="int8",
                   exp_avg_sq_dtype="int8", expect=0)
        picture = self.tmp / "both.svg"
        result = memtrain("report", *runs, "--out", picture, "--title", "Adam moments")
        self.assertEqual(result.returncode, 0, result.stderr)
        root = ElementTree.parse(picture).getroot()
        texts = {element.text for element in root.iter("{http://www.w3.org/2000/svg}text")}
        for text in ("Adam moments", "fp32", "int8", "validation loss", "validation loss relative to fp32"):
            self.assertIn(text, texts)

        self.assert_error(memtrain("report", *runs), 2, "--out")
        self.assert_error(memtrain("report", runs[0], "--title", "t"), 2, "--title")
        self.assert_error(memtrain("report", runs[0], self.tmp / "no-such-run", "--out", picture), 1, "no-such-run")


if __name__ == "__main__":
    unittest.main(verbosity=2)
