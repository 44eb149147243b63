"""End-to-end tests of the memtrain command line.

The contract: every bad input ends the run with ONE line on stderr, `memtrain: error: ...`, naming the flag or
file and what was expected; exit code 2 for flags and model configuration, 1 for data and files (shards,
weights); never a crash, and no memory.json in --out after a failed run. A tiny run succeeds and writes
metrics.jsonl and memory.json, and weights it saves load back.

Runs the binary named by MEMTRAIN_BIN (CTest sets it), else build/memtrain of this checkout.
"""

import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ElementTree
from pathlib import Path

MEMTRAIN = os.environ.get("MEMTRAIN_BIN") or str(Path(__file__).resolve().parents[2] / "build" / "memtrain")

# gpt2-tiny: 2 layers, 4 heads, C=64, 128 positions, vocabulary 256 (so byte tokens fit).
TINY_VOCAB = 256
TINY_POSITIONS = 128
BATCH, SEQ = 2, 32

SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256

data_dir: Path  # shards from `memtrain prepare --tokenizer byte`, made once for the module
module_tmp: tempfile.TemporaryDirectory


def memtrain(*args) -> subprocess.CompletedProcess:
    return subprocess.run([MEMTRAIN, *map(str, args)], capture_output=True, text=True, timeout=60)


def sample_text(words: int) -> str:
    """Deterministic English-like text, varied enough that the loss moves."""
    vocabulary = "the quick brown fox jumps over a lazy dog while seven small cats watch".split()
    return " ".join(vocabulary[(i * i + 3 * i) % len(vocabulary)] for i in range(words)) + "\n"


def write_shard(path: Path, tokens, magic=SHARD_MAGIC, version=SHARD_VERSION):
    """An llm.c token shard: 256 int32 header [magic, version, token count, 0...], then uint16 tokens."""
    header = [magic, version, len(tokens)] + [0] * (SHARD_HEADER_INTS - 3)
    path.write_bytes(struct.pack(f"<{SHARD_HEADER_INTS}i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))


def read_safetensors(path: Path) -> dict:
    """name -> (shape, raw float32 bytes); the metadata entry is dropped."""
    blob = path.read_bytes()
    (header_len,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8 : 8 + header_len])
    data = blob[8 + header_len :]
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", f"{path}: {name} is {entry['dtype']}"
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["shape"], data[begin:end])
    return tensors


def write_safetensors(path: Path, tensors: dict):
    """tensors: name -> (shape, raw float32 bytes), laid out in order."""
    header, offset = {}, 0
    for name, (shape, raw) in tensors.items():
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(raw for _, raw in tensors.values()))


def train(**flags) -> subprocess.CompletedProcess:
    """`memtrain train` on gpt2-tiny with small defaults: keyword arguments set flags (save_weights= is
    --save-weights), None leaves a flag out, True passes it without a value."""
    defaults = {
        "model": "gpt2-tiny",
        "data": data_dir,
        "train_iters": 2,
        "seq_length": SEQ,
        "micro_batch_size": BATCH,
        "eval_interval": 0,
        "threads": 1,
    }
    args = []
    for name, value in {**defaults, **flags}.items():
        if value is None:
            continue
        args.append("--" + name.replace("_", "-"))
        if value is not True:
            args.append(value)
    return memtrain("train", *args)


def read_metrics(out: Path) -> list:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def setUpModule():
    global data_dir, module_tmp
    module_tmp = tempfile.TemporaryDirectory(prefix="memtrain-cli-")
    text = Path(module_tmp.name) / "text.txt"
    text.write_text(sample_text(3000))
    data_dir = Path(module_tmp.name) / "data"
    result = memtrain("prepare", text, "--tokenizer", "byte", "--out", data_dir)
    assert result.returncode == 0, f"prepare failed ({result.returncode}): {result.stderr}"


def tearDownModule():
    module_tmp.cleanup()


class CliTestCase(unittest.TestCase):
    """A fresh temporary folder per test, which holds --out unless a test names another."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="memtrain-cli-case-"))
        self.addCleanup(shutil.rmtree, self.tmp)

    def train(self, **flags) -> subprocess.CompletedProcess:
        return train(**{"out": self.tmp / "run", **flags})

    def assert_error(self, result: subprocess.CompletedProcess, exit_code: int, *mentions):
        """One `memtrain: error:` line on stderr that names each of mentions, and the expected exit code."""
        context = f"\nexit code {result.returncode}, stderr:\n{result.stderr}"
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, "expected exactly one line on stderr" + context)
        self.assertTrue(lines[0].startswith("memtrain: error: "), "expected a `memtrain: error:` line" + context)
        for mention in mentions:
            self.assertIn(str(mention), lines[0], context)
        self.assertEqual(result.returncode, exit_code, context)

    def assert_train_fails(self, exit_code: int, *mentions, **flags):
        out = self.tmp / "failed-run"
        self.assert_error(self.train(out=out, **flags), exit_code, *mentions)
        self.assertFalse((out / "memory.json").exists(), f"a failed run left {out / 'memory.json'}")


class BadFlags(CliTestCase):
    def test_unknown_flag(self):
        self.assert_train_fails(2, "--no-such-flag", no_such_flag=True)

    def test_missing_required_flag(self):
        self.assert_train_fails(2, "--train-iters", train_iters=None)

    def test_unknown_isa_cap(self):
        # Every command reads the level (plan's and estimate's defaults too), so every one refuses it.
        for command in (["estimate", "--model", "gpt2-tiny"], ["plan", "--model", "gpt2-tiny", "--device-memory",
                                                               "1GiB", "--global-batch-size", "8"]):
            result = subprocess.run([MEMTRAIN, *command], capture_output=True, text=True, timeout=60,
                                    env={**os.environ, "MEMTRAIN_MAX_ISA": "avx"})
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
        shard = self.train_shard(self.good_tokens(), version=2)
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
        with tempfile.TemporaryDirectory(prefix="memtrain-cli-weights-") as tmp:
            weights = Path(tmp) / "good.safetensors"
            result = train(train_iters=1, save_weights=weights, out=Path(tmp) / "run")
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
        memory = json.loads((out / "memory.json").read_text())
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
        self.assert_train_fails(2, "--global-batch-size 3", "micro-batch 2", global_batch_size=3)

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
                memory = json.loads((out / "memory.json").read_text())
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
        base_memory = json.loads((self.tmp / "none" / "memory.json").read_text())
        for name, (flags, saves) in self.MODES.items():
            with self.subTest(name):
                out = self.tmp / name.replace(" ", "_")
                result = self.train(out=out, train_iters=4, **flags)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual([r["loss"] for r in read_metrics(out)], base_losses)
                memory = json.loads((out / "memory.json").read_text())
                self.assertEqual(memory["planned"], memory["measured"])
                activations, base_activations = memory["planned"]["activations"], base_memory["planned"]["activations"]
                (self.assertLess if saves else self.assertEqual)(activations, base_activations)

    def test_flag_rules(self):
        self.assert_train_fails(2, "--recompute-granularity", recompute_granularity="most")
        self.assert_train_fails(2, "--recompute-method", recompute_granularity="selective", recompute_method="block")
        self.assert_train_fails(2, "--recompute-num-layers", recompute_num_layers=2)
        self.assert_train_fails(2, "--recompute-num-layers 3", recompute_granularity="full", recompute_num_layers=3)


class MemoryTimeline(CliTestCase):
    CATEGORIES = ["params", "master", "grads", "optim", "activations", "workspace", "comm", "other"]
    TITLES = ["parameters", "gradients", "optimizer states", "activations", "workspace"]  # those holding bytes

    def train_with_timeline(self, out: Path, **flags) -> dict:
        result = self.train(out=out, train_iters=3, eval_interval=2, eval_iters=1, memory_timeline=True, **flags)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads((out / "memory_timeline.json").read_text())

    def test_timeline_has_one_point_per_op(self):
        out = self.tmp / "run"
        timeline = self.train_with_timeline(out)
        points = timeline["points"]
        self.assertEqual([p["op"] for p in points], list(range(len(points))))
        names = [p["name"] for p in points]
        self.assertEqual(len(set(names)), len(names), "an op recorded twice")
        self.assertEqual((names[0], names[timeline["loss_op"]], names[-1]), ("embed", "lm_head", "embed.backward"))

        planned = json.loads((out / "memory.json").read_text())["planned"]
        self.assertEqual(timeline["planned"], planned)
        for point in points:
            self.assertEqual(list(point["bytes"]), self.CATEGORIES, point)
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
        self.assertEqual(rows[0], "op,name," + ",".join(self.CATEGORIES) + ",total")
        points = json.loads((out / "memory_timeline.json").read_text())["points"]
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
