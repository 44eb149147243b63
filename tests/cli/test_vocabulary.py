"""The vocabulary meets the model (issue 29): shards of a vocabulary past 65,536 ids store 32-bit tokens and train
with measured == planned memory; shards record the tokenizer that made them (vocabulary size and fingerprint),
and `train` refuses a tokenizer, or shards, of more ids than the model's vocabulary, and shards of another
tokenizer than its --tokenizer (a warning with --allow-tokenizer-mismatch, and for shards that record none).

Runs the binary memtrain_cli.py names; the byte and GPT-2 tokenizers (GPT-2's files from scripts/setup.sh).
"""

import json
import math
import re
import unittest
from pathlib import Path

from memtrain_cli import (TINY_VOCAB, CliTestCase, memtrain, read_memory, read_metrics, read_shard_header,
                          sample_text, write_shard)

WIDE_VOCAB = 70_000  # past 16 bits' 65,536 ids
GPT2_VOCAB = 50_257


def tiny_config(folder: Path, vocab_size: int) -> Path:
    """gpt2-tiny's shape (2 layers, 4 heads, C=64, 128 positions) with another vocabulary, as a config.json."""
    path = folder / f"vocab{vocab_size}.json"
    path.write_text(json.dumps({"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128,
                                "vocab_size": vocab_size}))
    return path


def wide_ids() -> list:
    """The bytes of a text as ids past 65,535 (65,536 + byte)."""
    return [65_536 + b for b in sample_text(800).encode()]


class ThirtyTwoBitShards(CliTestCase):
    def write_wide_shards(self, ids: list, made_by=(WIDE_VOCAB, 0x1234ABCD)) -> Path:
        """Train and validation shards in version 2 (uint32) of `ids`, recorded as made by `made_by` (a
        tokenizer's vocabulary size and fingerprint; (0, 0): not recorded)."""
        folder = self.tmp / "wide"
        folder.mkdir(exist_ok=True)
        write_shard(folder / "w_train_000000.bin", ids[:3000], version=2, made_by=made_by)
        write_shard(folder / "w_val_000000.bin", ids[3000:], version=2, made_by=made_by)
        return folder

    def test_trains_on_32_bit_ids_with_measured_equal_to_planned(self):
        data, model = self.write_wide_shards(wide_ids()), tiny_config(self.tmp, WIDE_VOCAB)
        out = self.tmp / "run"
        result = self.train(model=model, data=data, out=out, train_iters=3, eval_interval=3, eval_iters=1,
                            lr=3e-3, expect=0)
        losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
        self.assertEqual(len(losses), 3, result.stdout)
        self.assertTrue(all(math.isfinite(loss) for loss in losses), losses)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])

    def test_an_id_past_the_model_vocabulary_is_an_error(self):
        ids = wide_ids()
        ids[1234] = WIDE_VOCAB - 1
        data, model = self.write_wide_shards(ids), tiny_config(self.tmp, WIDE_VOCAB - 1)
        # The shards record WIDE_VOCAB ids: more than the model has, named before any id is read.
        self.assert_train_fails(2, data / "w_train_000000.bin", f"tokenizer of {WIDE_VOCAB} ids",
                                f"vocabulary of {WIDE_VOCAB - 1}", model=model, data=data)
        # Unrecorded, the id itself is found, by shard and position.
        self.write_wide_shards(ids, made_by=(0, 0))
        self.assert_train_fails(1, data / "w_train_000000.bin", f"token {WIDE_VOCAB - 1} at position 1234",
                                model=model, data=data)


class TokenizerRecord(CliTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()  # cls.data: byte tokens
        cls.gpt2_data = Path(cls.class_tmp.name) / "gpt2"
        result = memtrain("prepare", cls.text, "--out", cls.gpt2_data)
        assert result.returncode == 0, f"prepare failed ({result.returncode}): {result.stderr}"
        cls.gpt2_fingerprint = re.search(r"vocabulary 50257, fingerprint crc32c ([0-9a-f]{8}), 16-bit ids",
                                         result.stdout).group(1)

    def test_prepare_records_and_prints_the_tokenizer(self):
        header = read_shard_header(self.gpt2_data / "data_train_000000.bin")
        self.assertEqual(header[:2], [20240520, 1])
        self.assertEqual(header[3], GPT2_VOCAB)
        self.assertEqual(f"{header[4]:08x}", self.gpt2_fingerprint)
        self.assertNotEqual(header[4], 0)
        bytes_header = read_shard_header(self.data / "data_val_000000.bin")
        self.assertEqual(bytes_header[3:5], [TINY_VOCAB, 0])  # the byte tokenizer: no file, fingerprint 0

    def test_the_run_tokenizer_matches_its_shards(self):
        model = tiny_config(self.tmp, GPT2_VOCAB)
        result = self.train(model=model, data=self.gpt2_data, tokenizer="gpt2", expect=0)
        self.assertNotIn("warning", result.stderr)
        result = self.train(tokenizer="byte", expect=0)  # gpt2-tiny on byte shards
        self.assertNotIn("warning", result.stderr)

    def test_shards_of_another_tokenizer_fail_unless_allowed(self):
        model = tiny_config(self.tmp, GPT2_VOCAB)
        shard = self.data / "data_train_000000.bin"
        mentions = (shard, "256 ids, fingerprint crc32c 00000000",
                    f"--tokenizer gpt2 ({GPT2_VOCAB} ids, fingerprint crc32c {self.gpt2_fingerprint})",
                    "--allow-tokenizer-mismatch")
        self.assert_train_fails(1, *mentions, model=model, tokenizer="gpt2")
        result = self.train(model=model, tokenizer="gpt2", allow_tokenizer_mismatch=True, expect=0)
        self.assertRegex(result.stderr, r"^memtrain: warning: shard .*data_train_000000.bin was prepared by a "
                                        r"tokenizer of 256 ids, fingerprint crc32c 00000000, not by --tokenizer gpt2")
        self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
        self.assert_train_fails(2, "--allow-tokenizer-mismatch needs --tokenizer", allow_tokenizer_mismatch=True)

    def test_a_tokenizer_of_more_ids_than_the_model_is_a_usage_error(self):
        self.assert_train_fails(2, f"--tokenizer gpt2 has {GPT2_VOCAB} ids", "--model gpt2-tiny",
                                f"vocabulary of {TINY_VOCAB}", tokenizer="gpt2")
        # The same with the model's weights given: the embedding has the model's rows.
        weights = self.tmp / "w.safetensors"
        self.train(out=self.tmp / "save", save_weights=weights, expect=0)
        self.assert_train_fails(2, f"--tokenizer gpt2 has {GPT2_VOCAB} ids", f"vocabulary of {TINY_VOCAB}",
                                tokenizer="gpt2", init_from=weights)

    def test_shards_of_more_ids_than_the_model_are_a_usage_error(self):
        self.assert_train_fails(2, self.gpt2_data / "data_train_000000.bin", f"tokenizer of {GPT2_VOCAB} ids",
                                f"--model gpt2-tiny's vocabulary of {TINY_VOCAB}", data=self.gpt2_data)

    def test_shards_that_record_no_tokenizer_still_train(self):
        data = self.tmp / "old"
        data.mkdir()
        tokens = list(sample_text(400).encode())
        write_shard(data / "old_train_000000.bin", tokens)  # as llm.c, and memtrain before, wrote them
        result = self.train(data=data, tokenizer="byte", expect=0)
        self.assertIn("old_train_000000.bin does not record the tokenizer that made it (not recorded",
                      result.stderr)
        self.assertIn("--tokenizer byte (256 ids, fingerprint crc32c 00000000) is not checked", result.stderr)
        self.train(data=data, out=self.tmp / "plain", expect=0)
        # A shard of another tokenizer beside them is still found.
        write_shard(data / "old_train_000001.bin", tokens, made_by=(TINY_VOCAB, 0xDEADBEEF))
        self.assert_train_fails(1, data / "old_train_000001.bin", "crc32c deadbeef", data=data, tokenizer="byte")


if __name__ == "__main__":
    unittest.main()
