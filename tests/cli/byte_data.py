"""Shared by the command-line tests that train gpt2-tiny under subprocesses: deterministic English-like text and a
test case whose class prepares it once as byte-tokenized shards (cls.data) in a temporary directory (cls.tmp)."""
import subprocess
import tempfile
import unittest
from pathlib import Path


def sample_text(words: int) -> str:
    vocabulary = "the quick brown fox jumps over a lazy dog while seven small cats watch".split()
    return " ".join(vocabulary[(i * i + 3 * i) % len(vocabulary)] for i in range(words)) + "\n"


class ByteDataTestCase(unittest.TestCase):
    MEMTRAIN = "build/memtrain"  # subclasses set the binary under test
    PREFIX = "memtrain-test-"

    @classmethod
    def setUpClass(cls):
        cls.tmp_dir = tempfile.TemporaryDirectory(prefix=cls.PREFIX)
        cls.tmp = Path(cls.tmp_dir.name)
        text = cls.tmp / "text.txt"
        text.write_text(sample_text(4000))
        cls.data = cls.tmp / "data"
        subprocess.run([cls.MEMTRAIN, "prepare", str(text), "--tokenizer", "byte", "--out", str(cls.data)],
                       check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp_dir.cleanup()
