"""Absurd sizes and bad input refused at once by name (issue 31, items 3 and 4, and item 9's config errors):
counts against the data and 64 bits, huge rank counts in estimate and plan, JSON numbers out of range in a
DeepSpeed config and in instruction records, a pack length against the records, values a flag's type cannot
hold, NaN, and a first SIGTERM during a long step said at once with the step's progress.

Runs the binary memtrain_cli.py names; nothing here trains more than a few steps.
"""
import json
import signal
import subprocess
import time
import unittest

from memtrain_cli import CliTestCase, command, memtrain, run_flags

BIG = 2**62  # a count that a 64-bit product with any other count overflows


class Bounds(CliTestCase):
    def estimate(self, *words, **flags):
        return memtrain("estimate", *run_flags(*words, **flags), timeout=60)

    def assert_refused(self, words, *mentions):
        """train with `words` fails at once: exit 2, one line naming each of mentions."""
        self.assert_error(self.train(*words, timeout=60), 2, *mentions)

    def test_counts_whose_products_overflow_are_refused_by_flag(self):
        for words, flag in ((["--train-iters", 2**63 - 1], "--train-iters"),
                            (["--global-batch-size", BIG], "--global-batch-size"),
                            (["--grad-accum-steps", BIG], "--grad-accum-steps"),
                            (["--verify-resume", BIG - 1, "--train-iters", BIG], "--train-iters")):
            with self.subTest(flag=flag):
                self.assert_refused(words, flag, "overflow")

    def test_a_step_larger_than_the_data_is_refused(self):
        for words, flag in ((["--global-batch-size", 2**40], "--global-batch-size"),
                            (["--grad-accum-steps", 2**31], "--grad-accum-steps")):
            with self.subTest(flag=flag):
                self.assert_refused(words, flag, "training shards")

    def test_an_evaluation_larger_than_the_validation_data_is_refused(self):
        self.assert_train_fails(2, "--eval-iters 1099511627776", "validation shards",
                                eval_interval=1, eval_iters=2**40)

    def test_values_the_flag_cannot_hold_are_refused(self):
        for flag, value, mention in (("--seed", -1, "whole number from 0"),
                                     ("--seed", 2**64, "18446744073709551615"),
                                     ("--train-iters", 2**63, "whole number"),
                                     ("--offload-chunk-mb", "1e20", "1048576 MiB"),
                                     ("--offload-chunk-mb", "1e-9", "one fp32 element"),
                                     ("--bucket-size-mb", "1e20", "1048576 MiB"),
                                     ("--lr", "nan", "expected a finite number"),
                                     ("--offload-chunk-mb", "nan", "expected a finite number")):
            with self.subTest(flag=flag, value=value):
                self.assert_error(self.estimate(flag, value), 2, flag, mention)

    def test_a_vocabulary_padded_past_token_ids_names_the_flag(self):
        result = self.estimate("--make-vocab-size-divisible-by", BIG)
        self.assert_error(result, 2, f"--make-vocab-size-divisible-by {BIG}", "2^31 - 1")
        self.assertNotIn("--model", result.stderr)

    def test_estimate_refuses_a_world_it_cannot_lay_out(self):
        result = self.estimate("--tp", 2, "--dp", 2**30, "--zero-stage", 3)
        self.assert_error(result, 2, f"--dp {2**30} x --tp 2 x --pp 1", "at most 65536 ranks")

    def test_plan_of_the_most_ranks_ends_without_a_crash(self):
        start = time.monotonic()
        result = memtrain("plan", "--model", "gpt2-tiny", "--ranks", 2**31 - 1, "--device-memory", "1GiB",
                          "--global-batch-size", 2**31 - 1, "--seq-length", 32, timeout=120)
        self.assertIn(result.returncode, (0, 3), result.stderr)
        self.assertNotIn("internal error", result.stderr)
        self.assertLess(time.monotonic() - start, 30)

    def test_plan_of_a_huge_global_batch_predicts_positive_speeds(self):
        # 2^58 sequences of 32 tokens are 2^63 tokens a step, which wrapped to a negative speed.
        result = memtrain("plan", "--model", "gpt2-tiny", "--ranks", 1, "--device-memory", "1GiB",
                          "--global-batch-size", 2**58, "--seq-length", 32, "--top", 1, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"predicted \d+ tokens/s")
        self.assertNotIn("predicted -", result.stdout)


class JsonInput(CliTestCase):
    def test_a_deepspeed_number_out_of_range_names_the_file_and_line(self):
        path = self.tmp / "ds.json"
        path.write_text('{\n  "train_micro_batch_size_per_gpu": 2,\n  "gradient_clipping": 1e400\n}\n')
        self.assert_train_fails(2, f"--deepspeed-config {path} line 3", "1e400", deepspeed_config=path)

    def test_deepspeed_syntax_errors_name_the_line(self):
        path = self.tmp / "ds.json"
        path.write_text('{\n  "gradient_clipping": 1.0,\n  "bf16": {"enabled": tru}\n}\n')
        self.assert_train_fails(2, f"--deepspeed-config {path} line 3", "not valid JSON", deepspeed_config=path)

    def test_deepspeed_batch_keys_are_named_as_keys(self):
        path = self.tmp / "ds.json"
        path.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                    "gradient_accumulation_steps": 2}))
        result = self.train(deepspeed_config=path, micro_batch_size=None)
        self.assert_error(result, 2, f"--deepspeed-config {path}: gradient_accumulation_steps 2",
                          f"--deepspeed-config {path}: train_batch_size 8")
        self.assertNotIn("--grad-accum-steps", result.stderr)

    def test_an_instruction_record_number_out_of_range_names_the_line(self):
        jsonl = self.tmp / "records.jsonl"
        jsonl.write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": "b", "n": 1e400}\n')
        result = memtrain("prepare", "--jsonl", jsonl, "--tokenizer", "byte", "--out", self.tmp / "out")
        self.assert_error(result, 1, f"{jsonl} line 2", "1e400")

    def test_a_pack_longer_than_the_records_is_refused(self):
        jsonl = self.tmp / "records.jsonl"
        jsonl.write_text('{"prompt": "a", "completion": "b"}\n' * 4)
        result = memtrain("prepare", "--jsonl", jsonl, "--tokenizer", "byte", "--out", self.tmp / "out",
                          "--pack", "--seq-length", 2**62, "--val-fraction", 0)
        self.assert_error(result, 2, f"--seq-length {2**62}", "tokens of all --jsonl")
        self.assertFalse((self.tmp / "out").exists())


    def test_more_shards_than_their_names_number_is_refused_before_writing(self):
        text = self.tmp / "big.txt"
        text.write_text("ab" * 600_000)  # 1.2 M byte tokens: 1.2 M shards of one token
        result = memtrain("prepare", text, "--tokenizer", "byte", "--out", self.tmp / "shards", "--shard-tokens", 1)
        self.assert_error(result, 2, "--shard-tokens 1 would cut the", "more than the 1000000 that shard names")
        self.assertEqual(list((self.tmp / "shards").glob("*.bin")), [])

class StopSignal(CliTestCase):
    def test_a_first_sigterm_in_a_long_step_says_so_at_once(self):
        args = command("train", *run_flags(data=self.data, out=self.tmp / "run", train_iters=1000,
                                           grad_accum_steps=200))
        with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
            while not run.stdout.readline().startswith("step"):  # the first step's line: now in a step
                pass
            run.send_signal(signal.SIGTERM)
            start = time.monotonic()
            line = run.stderr.readline()
            self.assertLess(time.monotonic() - start, 5)
            self.assertRegex(line, r"^memtrain: SIGTERM: stopping after step \d+, which is at micro-batch "
                                   r"\d+ of 200; send it again to stop at once$")
            run.communicate(timeout=60)


if __name__ == "__main__":
    unittest.main()
