"""Instruction data from the command line (issue 18, item 5): `memtrain prepare --jsonl` writes token shards
with loss masks beside them, bad records are one-line errors naming the file and line and write nothing, and
`memtrain train` on them plans the mask (measured == planned), counts only the masked targets (an all-ones mask
is bitwise no mask), evaluates with it and resumes bitwise; `--pack` puts several records in a sequence, says
what padding that saved, and trains on them with their positions planned, refusing another sequence length.

Runs the binary memtrain_cli.py names.
"""
import json
import re
import shutil
import struct
import unittest
from pathlib import Path

from memtrain_cli import (SHARD_HEADER_INTS, TINY_RUN, CliTestCase, ResumeTestCase, memtrain, read_memory,
                          read_metrics, run_flags, sample_text)

MASK_MAGIC, MASK_VERSION = 20261201, 1


def records(count: int) -> str:
    """JSON lines alternating prompt/completion records and chats, their text from sample_text."""
    words = sample_text(6 * count).split()
    lines = []
    for i in range(count):
        question, answer = " ".join(words[6 * i : 6 * i + 3]), " ".join(words[6 * i + 3 : 6 * i + 6])
        if i % 2:
            lines.append({"messages": [{"role": "user", "content": question},
                                       {"role": "assistant", "content": answer}]})
        else:
            lines.append({"prompt": f"Q: {question}?\nA: ", "completion": answer})
    return "".join(json.dumps(line) + "\n" for line in lines)


def read_mask(path: Path) -> bytes:
    blob = path.read_bytes()
    header = struct.unpack_from(f"<{SHARD_HEADER_INTS}i", blob)
    assert header[:2] == (MASK_MAGIC, MASK_VERSION), header[:3]
    assert header[2] == len(blob) - 4 * SHARD_HEADER_INTS
    return blob[4 * SHARD_HEADER_INTS :]


def write_mask(path: Path, mask: bytes):
    header = [MASK_MAGIC, MASK_VERSION, len(mask)] + [0] * (SHARD_HEADER_INTS - 3)
    path.write_bytes(struct.pack(f"<{SHARD_HEADER_INTS}i", *header) + mask)


def prepare_jsonl(jsonl: Path, out: Path, *flags):
    return memtrain("prepare", "--jsonl", jsonl, "--tokenizer", "byte", "--out", out, *flags)


def prepare_records(folder: Path, name: str, *flags):
    """records(400) in folder/records.jsonl, prepared with `flags` into folder/name: the file, the shards'
    folder and prepare's output."""
    jsonl = Path(folder) / "records.jsonl"
    if not jsonl.exists():
        jsonl.write_text(records(400))
    result = prepare_jsonl(jsonl, Path(folder) / name, *flags)
    assert result.returncode == 0, result.stderr
    return jsonl, Path(folder) / name, result.stdout


def assert_estimate_is(test, memory, **flags):
    """`memtrain estimate` of the run, given its --data, plans the run's bytes in every category."""
    result = memtrain("estimate", *run_flags(**flags), "--json")
    test.assertEqual(result.returncode, 0, result.stderr)
    test.assertEqual(json.loads(result.stdout)["ranks"][0]["bytes"], memory["planned"])


class InstructionData(CliTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.jsonl, cls.sft, cls.prepare_stdout = prepare_records(cls.class_tmp.name, "sft")

    def test_prepare_writes_a_mask_beside_each_shard(self):
        self.assertIn("400 records; the loss counts", self.prepare_stdout)
        for split in ("train", "val"):
            shard = self.sft / f"data_{split}_000000.bin"
            mask = read_mask(shard.with_suffix(".mask"))
            self.assertEqual(len(mask), (shard.stat().st_size - 4 * SHARD_HEADER_INTS) // 2)
            self.assertEqual(set(mask), {0, 1})
        # The first record: its prompt is not counted, its completion and the closing byte 0 are.
        tokens = (self.sft / "data_train_000000.bin").read_bytes()[4 * SHARD_HEADER_INTS :]
        first = json.loads(self.jsonl.read_text().splitlines()[0])
        length = len(first["prompt"]) + len(first["completion"]) + 1
        mask = read_mask(self.sft / "data_train_000000.mask")
        self.assertEqual(bytes(tokens[0 : 2 * length : 2]), (first["prompt"] + first["completion"]).encode() + b"\0")
        self.assertEqual(mask[:length], bytes(len(first["prompt"])) + b"\1" * (len(first["completion"]) + 1))

    def test_bad_records_name_the_line_and_write_nothing(self):
        good = records(3)
        for line, mention in (("{not json", "line 4: invalid JSON"),
                              ('{"prompt": "x"}', 'line 4: missing key "completion"'),
                              ('{"prompt": "x", "completion": 7}', '"completion" is number, expected a string'),
                              ('{"prompt": "x", "completion": ""}', "line 4: empty completion")):
            with self.subTest(line=line):
                jsonl = self.tmp / "bad.jsonl"
                jsonl.write_text(good + line + "\n")
                out = self.tmp / "bad-out"
                self.assert_error(prepare_jsonl(jsonl, out), 1, jsonl, mention)
                self.assertFalse(out.exists() and any(out.iterdir()), "a failed prepare wrote files")
        self.assert_error(prepare_jsonl(self.jsonl, self.tmp / "o", "--prompt-key", "input", "--val-fraction", "0"),
                          1, 'line 1: missing key "input"')
        self.assert_error(memtrain("prepare", self.text, "--jsonl", self.jsonl, "--out", self.tmp / "o"), 2,
                          "--jsonl")
        self.assert_error(memtrain("prepare", "--out", self.tmp / "o"), 2, "--jsonl")

    def test_a_record_with_both_forms_is_refused_naming_its_line(self):
        jsonl = self.tmp / "both.jsonl"
        both = {"prompt": "Q", "completion": "A", "messages": [{"role": "assistant", "content": "B"}]}
        jsonl.write_text(records(3) + json.dumps(both) + "\n")
        self.assert_error(prepare_jsonl(jsonl, self.tmp / "o"), 1, f"{jsonl} line 4", '"messages" and "prompt"')
        self.assertFalse((self.tmp / "o").exists())

    def test_a_huge_last_record_is_refused_rather_than_moved_to_validation(self):
        jsonl = self.tmp / "huge.jsonl"
        jsonl.write_text(records(400) + json.dumps({"prompt": "Q", "completion": "x" * 60000}) + "\n")
        result = prepare_jsonl(jsonl, self.tmp / "o")
        self.assert_error(result, 1, f"{jsonl} line 401", "a record of 60002 tokens", "--val-fraction 0")
        self.assertEqual(prepare_jsonl(jsonl, self.tmp / "o", "--val-fraction", 0).returncode, 0)

    def test_masks_that_count_nothing_are_refused(self):
        data = self.tmp / "uncounted"
        shutil.copytree(self.sft, data)
        for mask in data.glob("data_train_*.mask"):
            blob = mask.read_bytes()
            write_mask(mask, bytes(len(blob) - 4 * SHARD_HEADER_INTS))
        self.assert_train_fails(1, f"--data {data}", "count no target", data=data)

    def test_training_counts_the_masked_targets_only(self):
        out = self.tmp / "sft-run"
        evaluated = {"eval_interval": 10, "eval_iters": 2}
        self.train(data=self.sft, out=out, train_iters=30, lr=3e-3, expect=0, **evaluated)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])
        plain = self.tmp / "plain-run"
        self.train(out=plain, expect=0, **evaluated)
        B, T = TINY_RUN["micro_batch_size"], TINY_RUN["seq_length"]
        # batch.loss_mask: one byte per target, in the batch's category; the loaders need no more.
        self.assertEqual(memory["planned"]["other"] - read_memory(plain)["planned"]["other"], B * T)
        assert_estimate_is(self, memory, data=self.sft, **evaluated)
        metrics = read_metrics(out)
        self.assertTrue(all("val_loss" in m for m in metrics if m["step"] % 10 == 0))
        losses = [m["loss"] for m in metrics]
        self.assertLess(sum(losses[-5:]) / 5, losses[0])

    def test_an_all_ones_mask_is_bitwise_no_mask_and_a_real_one_is_not(self):
        ones, masked = self.tmp / "ones", self.tmp / "masked"
        for copy in (ones, masked):
            shutil.copytree(self.data, copy)
        for shard in ones.glob("*.bin"):
            write_mask(shard.with_suffix(".mask"), b"\1" * ((shard.stat().st_size - 4 * SHARD_HEADER_INTS) // 2))
        for shard in masked.glob("*.bin"):
            count = (shard.stat().st_size - 4 * SHARD_HEADER_INTS) // 2
            write_mask(shard.with_suffix(".mask"), bytes(i % 3 != 0 for i in range(count)))
        runs = {}
        for name, data in (("plain", self.data), ("ones", ones), ("masked", masked)):
            self.train(data=data, out=self.tmp / name, expect=0)
            runs[name] = [m["loss"] for m in read_metrics(self.tmp / name)]
        self.assertEqual(runs["ones"], runs["plain"])
        self.assertNotEqual(runs["masked"][0], runs["plain"][0])

    def test_masks_on_some_shards_only_are_refused(self):
        mixed = self.tmp / "mixed"
        shutil.copytree(self.sft, mixed)
        (mixed / "data_val_000000.mask").unlink()
        self.assert_train_fails(1, "data_val_000000.bin", "loss mask", data=mixed, eval_interval=1)
        (mixed / "data_train_000000.mask").write_bytes(b"short")
        self.assert_train_fails(1, "data_train_000000.mask", data=mixed)


class PackedInstructionData(CliTestCase):
    T = 128  # two or three of records()' 30 to 60 bytes to a sequence

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.jsonl, cls.packed, cls.prepared = prepare_records(cls.class_tmp.name, "packed", "--pack", "--seq-length",
                                                              cls.T)

    def test_prepare_reports_the_padding_saved(self):
        report = re.search(r"packed 400 records into (\d+) sequences of 128 tokens: (\d+) padding tokens \(.*\), "
                           r"against (\d+) \(.*\) with one record per sequence", self.prepared)
        self.assertIsNotNone(report, self.prepared)
        sequences, padding, unpacked = map(int, report.groups())
        self.assertLess(sequences, 400)
        self.assertLess(padding, unpacked)
        self.assert_error(prepare_jsonl(self.jsonl, self.tmp / "o", "--pack"), 2, "--seq-length")
        self.assert_error(prepare_jsonl(self.jsonl, self.tmp / "o", "--pack", "--seq-length", 8), 1,
                          "line 1: a record of", "--seq-length 8")

    def test_training_on_packed_records_plans_their_positions(self):
        out, plain = self.tmp / "packed-run", self.tmp / "plain-run"
        self.train(data=self.packed, out=out, seq_length=self.T, train_iters=20, lr=3e-3, expect=0)
        self.train(out=plain, seq_length=self.T, expect=0)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])
        B = TINY_RUN["micro_batch_size"]
        # batch.loss_mask (1 byte) and batch.positions (int32) per token.
        self.assertEqual(memory["planned"]["other"] - read_memory(plain)["planned"]["other"], 5 * B * self.T)
        assert_estimate_is(self, memory, data=self.packed, seq_length=self.T)
        losses = [m["loss"] for m in read_metrics(out)]
        self.assertLess(sum(losses[-5:]) / 5, losses[0])
        self.assert_train_fails(1, "packed for sequences of 128 tokens", "--pack --seq-length", data=self.packed,
                                seq_length=64)


class InstructionResume(ResumeTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _, cls.data, _ = prepare_records(cls.class_tmp.name, "sft")

    def test_resume_is_bitwise(self):
        self.assert_bitwise("sft", ["--eval-interval", "2", "--eval-iters", "1"])


class PackedResume(ResumeTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _, cls.data, _ = prepare_records(cls.class_tmp.name, "packed", "--pack", "--seq-length", 128)

    def test_resume_is_bitwise(self):
        self.assert_bitwise("packed", ["--seq-length", "128", "--eval-interval", "2", "--eval-iters", "1"])


if __name__ == "__main__":
    unittest.main()
