"""What the command-line tests share: the binary under test, one way to run it (alone or under mpirun), a
`train()` whose defaults are one tiny run that each test changes only where it says so, readers of the JSON a
run writes, the file formats tests write by hand, a test case that prepares tiny byte-token data once, and one
that compares a run of 2n steps with n steps and a resume.

The binary is MEMTRAIN_BIN (CTest sets it), else build/memtrain of this checkout.
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

MEMTRAIN = os.environ.get("MEMTRAIN_BIN") or str(Path(__file__).resolve().parents[2] / "build" / "memtrain")

# gpt2-tiny (2 layers, 4 heads, C=64, 128 positions, vocabulary 256 so that byte tokens fit) for two steps of
# 2 x 32 tokens on one thread, without evaluation. A test passes what differs.
TINY_RUN = {"model": "gpt2-tiny", "seq_length": 32, "micro_batch_size": 2, "train_iters": 2, "eval_interval": 0,
            "threads": 1}
TINY_VOCAB, TINY_POSITIONS = 256, 128
# memory.json's categories, in its order.
CATEGORIES = ["params", "frozen", "master", "grads", "optim", "activations", "workspace", "comm", "other"]

SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256


def mpirun(ranks: int) -> list:
    """The launcher of `ranks` processes: none for one; Open MPI's flags because containers often run as root
    and CI machines have fewer cores than ranks."""
    return [] if ranks == 1 else ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]


def command(*args, ranks=1, launcher=None) -> list:
    """The argument list that runs memtrain with `args`, under `launcher` (e.g. qemu) or mpirun(ranks)."""
    return [*(mpirun(ranks) if launcher is None else launcher), MEMTRAIN, *map(str, args)]


def memtrain(*args, ranks=1, launcher=None, env=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs memtrain to the end, its output captured as text; `env` adds to this process's environment."""
    return subprocess.run(command(*args, ranks=ranks, launcher=launcher), capture_output=True, text=True,
                          env={**os.environ, **env} if env else None, cwd=cwd, timeout=timeout)


def flag_words(flags: dict) -> list:
    """Keyword flags as command-line words: seq_length=32 is `--seq-length 32`, True a flag without a value,
    None leaves the flag out."""
    words = []
    for name, value in flags.items():
        if value is None:
            continue
        words.append("--" + name.replace("_", "-"))
        if value is not True:
            words.append(str(value))
    return words


def run_flags(*words, **flags) -> list:
    """TINY_RUN changed by `flags`, then `words` (command-line words, which win over a keyword or default of
    the same flag). What train takes and estimate reads."""
    named = {word for word in map(str, words) if word.startswith("--")}
    merged = {name: value for name, value in {**TINY_RUN, **flags}.items()
              if "--" + name.replace("_", "-") not in named}
    return flag_words(merged) + list(map(str, words))


def train(*words, ranks=1, launcher=None, env=None, timeout=300, **flags) -> subprocess.CompletedProcess:
    """`memtrain train` with run_flags(*words, **flags)."""
    return memtrain("train", *run_flags(*words, **flags), ranks=ranks, launcher=launcher, env=env, timeout=timeout)


def kill_a_rank(test: unittest.TestCase, args: list, out: Path, ranks: int):
    """Starts the mpirun job `args` of `ranks` memtrain ranks writing into `out`, SIGKILLs one rank once it is
    training, and asserts that the whole job ends, non-zero, within two minutes."""
    def rank_processes():
        pids = []
        for entry in Path("/proc").iterdir():
            try:
                words = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if entry.name.isdigit() and words[0].endswith(b"memtrain") and str(out).encode() in words:
                pids.append(int(entry.name))
        return pids

    job = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (Path(out) / "metrics.jsonl").exists() or len(rank_processes()) < ranks:
            test.assertIsNone(job.poll(), "the job ended before it was killed")
            test.assertLess(time.monotonic(), deadline, "the job did not start training")
            time.sleep(0.2)
        os.kill(max(rank_processes()), signal.SIGKILL)
        test.assertNotEqual(job.wait(timeout=120), 0)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        job.stderr.close()


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def read_metrics(out: Path) -> list:
    """metrics.jsonl of the run in `out`: one record per logged step."""
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


# What a parallel layout's run must match one process's run in, step for step.
COMPARED = ("loss", "grad_norm", "val_loss")


def compared_records(out: Path) -> list:
    """Each logged step's COMPARED values of the run in `out`."""
    return [{k: r[k] for k in COMPARED if k in r} for r in read_metrics(out)]


def assert_follows(test: unittest.TestCase, out: Path, reference: Path, tolerance: float, steps: int):
    """The run in `out` logged `steps` steps whose COMPARED values are the reference run's within `tolerance`
    relative."""
    got, want = compared_records(out), compared_records(reference)
    test.assertEqual(len(got), steps)
    test.assertEqual([sorted(r) for r in got], [sorted(r) for r in want])
    for step, (a, b) in enumerate(zip(got, want), 1):
        for key in b:
            test.assertAlmostEqual(a[key], b[key], delta=tolerance * abs(b[key]),
                                   msg=f"step {step} {key}: {a[key]} against one process's {b[key]}")


def read_memory(out: Path, rank=None) -> dict:
    """memory.json of the run in `out`, or memory.rank{rank}.json of one rank of several."""
    return read_json(Path(out) / ("memory.json" if rank is None else f"memory.rank{rank}.json"))


def sample_text(words: int) -> str:
    """Deterministic English-like text, varied enough that the loss moves."""
    vocabulary = "the quick brown fox jumps over a lazy dog while seven small cats watch".split()
    return " ".join(vocabulary[(i * i + 3 * i) % len(vocabulary)] for i in range(words)) + "\n"


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected 0x82F63B78), bit by bit: the checksum of memtrain's manifests."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def write_shard(path: Path, tokens, magic=SHARD_MAGIC, version=SHARD_VERSION, made_by=(0, 0)):
    """An llm.c token shard: 256 int32 header [magic, version, token count, the vocabulary size and fingerprint
    of the tokenizer that made it (0: not recorded), 0...], then the tokens: uint32 in version 2, else uint16."""
    vocab_size, fingerprint = made_by
    header = struct.pack("<3iiI", magic, version, len(tokens), vocab_size, fingerprint)
    header += bytes(4 * SHARD_HEADER_INTS - len(header))
    path.write_bytes(header + struct.pack(f"<{len(tokens)}{'I' if version == 2 else 'H'}", *tokens))


def read_shard_header(path: Path) -> list:
    """The 256 int32 of a shard's header, [4] (the tokenizer's fingerprint) as unsigned."""
    header = list(struct.unpack_from(f"<{SHARD_HEADER_INTS}i", Path(path).read_bytes()))
    header[4] &= 0xFFFFFFFF
    return header


def read_safetensors(path: Path, dtype="F32") -> dict:
    """name -> (shape, raw bytes) of tensors that must all be of `dtype` (None: any); the metadata entry is
    dropped."""
    blob = Path(path).read_bytes()
    (header_len,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8 : 8 + header_len])
    data = blob[8 + header_len :]
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        assert dtype is None or entry["dtype"] == dtype, f"{path}: {name} is {entry['dtype']}"
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


class CliTestCase(unittest.TestCase):
    """Byte-token shards of sample_text prepared once per class (cls.data, from the text file cls.text), and a
    fresh folder per test (self.tmp), which holds --out unless a test names another."""

    @classmethod
    def setUpClass(cls):
        cls.class_tmp = tempfile.TemporaryDirectory(prefix=f"memtrain-{cls.__name__}-")
        cls.text = Path(cls.class_tmp.name) / "text.txt"
        cls.text.write_text(sample_text(4000))
        cls.data = Path(cls.class_tmp.name) / "data"
        result = memtrain("prepare", cls.text, "--tokenizer", "byte", "--out", cls.data)
        assert result.returncode == 0, f"prepare failed ({result.returncode}): {result.stderr}"

    @classmethod
    def tearDownClass(cls):
        cls.class_tmp.cleanup()

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="case-", dir=self.class_tmp.name))
        self.addCleanup(shutil.rmtree, self.tmp)

    def train(self, *words, expect=None, **flags) -> subprocess.CompletedProcess:
        """train() on this class's data into self.tmp / "run"; with `expect`, asserts that exit code."""
        result = train(*words, **{"data": self.data, "out": self.tmp / "run", **flags})
        if expect is not None:
            self.assertEqual(result.returncode, expect, result.stdout[-3000:] + result.stderr[-3000:])
        return result

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
        """The run fails with assert_error's line and leaves no memory.json in its --out."""
        out = self.tmp / "failed-run"
        self.assert_error(self.train(out=out, **flags), exit_code, *mentions)
        self.assertFalse((out / "memory.json").exists(), f"a failed run left {out / 'memory.json'}")


class ResumeTestCase(CliTestCase):
    """Runs of 2 * N steps against N steps (--exit-interval) and a resume for N more."""
    N = 3  # steps before the save
    COMPARED = ("step", "loss", "lr", "grad_norm", "loss_scale", "skipped")

    def losses(self, out):
        return [r["loss"] for r in read_metrics(out)]

    def assert_close(self, got, want, tolerance=1e-5):
        self.assertEqual(len(got), len(want))
        for step, (a, b) in enumerate(zip(got, want), 1):
            self.assertAlmostEqual(a, b, delta=tolerance * abs(b), msg=f"step {step}: {a} against {b}")

    def assert_same_weights(self, path, reference, tolerance):
        """The same tensor names and shapes; each tensor's largest difference within `tolerance` of its largest
        value."""
        got, want = read_safetensors(path), read_safetensors(reference)
        self.assertEqual({k: s for k, (s, _) in got.items()}, {k: s for k, (s, _) in want.items()})
        for name, (_, raw) in want.items():
            a, b = memoryview(got[name][1]).cast("f"), memoryview(raw).cast("f")
            scale = max(abs(v) for v in b)
            worst = max(abs(x - y) for x, y in zip(a, b))
            self.assertLessEqual(worst, tolerance * scale, f"{path}: {name} differs by {worst} (largest {scale})")

    def train(self, out, *flags, ranks=1, iters=None, expect=0):
        return super().train(*flags, out=out, ranks=ranks, train_iters=iters or 2 * self.N, expect=expect)

    def records(self, out):
        return [{k: r[k] for k in self.COMPARED if k in r} for r in read_metrics(out)]

    def uninterrupted_and_resumed(self, name, flags, ranks=1, resume_ranks=None, resume_flags=None):
        """Runs 2N steps straight, and N steps then a resume to 2N (on resume_ranks with resume_flags, when
        given); returns both out dirs, each with its checkpoints in ckpt/."""
        straight, split = self.tmp / f"{name}-straight", self.tmp / f"{name}-split"
        self.train(straight, "--save", str(straight / "ckpt"), *flags, ranks=ranks)
        first = self.train(split, "--save", str(split / "ckpt"), "--exit-interval", str(self.N), *flags,
                           ranks=ranks)
        self.assertIn(f"--exit-interval reached after step {self.N}", first.stdout)
        second = self.train(split, "--save", str(split / "ckpt"), "--resume", "auto", *(resume_flags or flags),
                            ranks=resume_ranks or ranks)
        self.assertIn("resumed from", second.stdout)
        return straight, split

    def assert_bitwise(self, name, flags, ranks=1):
        """The resumed run is the uninterrupted one: every record, and the final checkpoint's rank files
        (weights, master, moments and their scales) and model file, bit for bit."""
        straight, split = self.uninterrupted_and_resumed(name, flags, ranks)
        self.assertEqual(self.records(split), self.records(straight))
        self.assertEqual(len(self.records(split)), 2 * self.N)
        final = f"ckpt/step_{2 * self.N:08d}"
        for rank in range(ranks):
            rank_file = f"{final}/rank{rank}.safetensors"
            self.assertEqual((split / rank_file).read_bytes(), (straight / rank_file).read_bytes(), rank_file)
        self.assertEqual((split / final / "model.safetensors").read_bytes(),
                         (straight / final / "model.safetensors").read_bytes())
        return straight
