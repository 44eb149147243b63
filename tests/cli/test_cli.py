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
        for record in records:
            evaluated = record["step"] in (2, 3)  # every 2 steps, and the last
            expected = {"step", "loss", "lr", "grad_norm", "tokens_per_sec", "step_ms"}
            self.assertEqual(set(record), expected | ({"val_loss"} if evaluated else set()), record)
            self.assertTrue(all(math.isfinite(record[k]) for k in record), record)

        memory = json.loads((out / "memory.json").read_text())
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
