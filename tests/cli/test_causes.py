"""Errors that name the real cause (issue 31, item 9): a NaN in a checkpoint (weights, 8-bit moments' scales) is
refused on load and by export naming the file and tensor, not reported as a diverged step; --weight-decay that
would flip the weights' sign is refused by name; a LoRA base is the same base by content whatever path names it,
and export --merge-adapter takes --init-from where the recorded path does not reach it; an index.json entry
outside the model folder is refused; SIGTERM without anything to save warns at once and exits 143.

Runs the binary memtrain_cli.py names.
"""
import json
import signal
import struct
import subprocess
import time
import unittest

from memtrain_cli import CliTestCase, command, memtrain, run_flags

LORA = {"lora_rank": 4, "lora_alpha": 8}
INT8_MOMENTS = ["--bf16", "--exp-avg-dtype", "int8", "--exp-avg-sq-dtype", "int8"]


def crc32c_table():
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ (0x82F63B78 if n & 1 else 0)
        table.append(n)
    return table


CRC32C_TABLE = crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), table-driven: the checksum of memtrain's manifests."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ CRC32C_TABLE[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


def put_nan(checkpoint, file_name: str, tensor: str):
    """Element 0 of `tensor` (fp32) in the checkpoint's `file_name` made NaN, the manifest's checksum updated as
    a corruption that checksums cannot see would leave it."""
    path = checkpoint / file_name
    blob = bytearray(path.read_bytes())
    header_size = struct.unpack_from("<Q", blob)[0]
    entry = json.loads(blob[8 : 8 + header_size])[tensor]
    assert entry["dtype"] == "F32", entry
    struct.pack_into("<f", blob, 8 + header_size + entry["data_offsets"][0], float("nan"))
    path.write_bytes(bytes(blob))
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    for f in manifest["files"]:
        if f["name"] == file_name:
            f["crc32c"] = f"{crc32c(bytes(blob)):08x}"
    (checkpoint / "manifest.json").write_text(json.dumps(manifest, indent=2))


class NonFiniteInputs(CliTestCase):
    def test_a_nan_in_a_checkpoint_is_refused_naming_its_file_and_tensor(self):
        for name, words, tensor in (("weights", [], "weights"), ("scales", INT8_MOMENTS, "adam_m_scales")):
            with self.subTest(tensor=tensor):
                save = self.tmp / name
                self.train(*words, save=save, out=self.tmp / f"{name}-run", expect=0)
                checkpoint = save / "step_00000002"
                put_nan(checkpoint, "rank0.safetensors", tensor)
                result = self.train(*words, load=checkpoint, train_iters=3, out=self.tmp / f"{name}-again")
                self.assert_error(result, 1, f"{checkpoint / 'rank0.safetensors'}", f"tensor {tensor}", "NaN",
                                  "corrupt")
                self.assertNotIn("--lr", result.stderr)
        exported = memtrain("export", self.tmp / "weights", "--out", self.tmp / "exported")
        self.assert_error(exported, 1, "rank0.safetensors", "tensor weights", "NaN")
        self.assertFalse((self.tmp / "exported" / "model.safetensors").exists())

    def test_a_weight_decay_that_flips_the_weights_is_refused_by_name(self):
        self.assert_train_fails(2, "--weight-decay 1e+30", "--lr 0.0006", "below 1", weight_decay=1e30)
        self.assert_train_fails(2, "--weight-decay 101", "--lr 0.01", "below 1", lr=0.01, weight_decay=101)
        self.train(out=self.tmp / "fine", lr=0.01, weight_decay=90, expect=0)


class LoraBaseByContent(CliTestCase):
    def setUp(self):
        super().setUp()
        self.train(save_weights=self.tmp / "base.safetensors", out=self.tmp / "full", expect=0)
        # Trained from self.tmp with a relative --init-from, which the checkpoint records as given.
        trained = memtrain("train", *run_flags(data=self.data, out="lora", save="saves", init_from="base.safetensors",
                                               **LORA), cwd=self.tmp)
        self.assertEqual(trained.returncode, 0, trained.stderr)
        self.checkpoint = self.tmp / "saves" / "step_00000002"

    def test_a_resume_through_an_absolute_path_to_the_same_base_is_accepted(self):
        result = self.train(init_from=self.tmp / "base.safetensors", load=self.checkpoint, train_iters=3,
                            out=self.tmp / "again", expect=0, **LORA)
        self.assertIn("resumed from", result.stdout)

    def test_export_merge_adapter_from_elsewhere_takes_the_base_by_init_from(self):
        elsewhere = self.tmp / "elsewhere"
        elsewhere.mkdir()
        out = self.tmp / "merged"
        missing = memtrain("export", self.checkpoint, "--merge-adapter", "--out", out, cwd=elsewhere)
        self.assert_error(missing, 1, "base.safetensors", "missing", "--init-from")
        named = memtrain("export", self.checkpoint, "--merge-adapter", "--init-from", self.tmp / "base.safetensors",
                         "--out", out, cwd=elsewhere)
        self.assertEqual(named.returncode, 0, named.stderr)
        self.assertTrue((out / "model.safetensors").exists())
        other = self.tmp / "other.safetensors"
        self.train(save_weights=other, out=self.tmp / "other-run", seed=7, expect=0)
        wrong = memtrain("export", self.checkpoint, "--merge-adapter", "--init-from", other, "--out",
                         self.tmp / "wrong", cwd=elsewhere)
        self.assert_error(wrong, 1, str(other), "changed after training")
        self.assert_error(memtrain("export", self.checkpoint, "--init-from", other, "--out", self.tmp / "x"), 2,
                          "--init-from", "--merge-adapter")


class IndexOutsideTheFolder(CliTestCase):
    def test_an_index_entry_outside_the_model_folder_is_refused(self):
        self.train(save_weights=self.tmp / "model.safetensors", out=self.tmp / "full", expect=0)
        folder = self.tmp / "model"
        folder.mkdir()
        index = {"metadata": {}, "weight_map": {"wte.weight": "../model.safetensors"}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        self.assert_train_fails(1, "model.safetensors.index.json", "weight_map", "../model.safetensors",
                                init_from=folder)


class StopWithNothingToSave(CliTestCase):
    def test_sigterm_without_any_save_warns_at_once_and_exits_143(self):
        out = self.tmp / "run"
        process = subprocess.Popen(command("train", *run_flags(data=self.data, out=out, train_iters=1000000)),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(process.kill)
        metrics, deadline = out / "metrics.jsonl", time.monotonic() + 60
        while (not metrics.exists() or len(metrics.read_text().splitlines()) < 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        lines = stderr.splitlines()
        self.assertEqual(process.returncode, 128 + signal.SIGTERM, stderr)
        # The step's progress (train/signals.h), the warning, and the error at the end.
        self.assertEqual(len(lines), 3, stderr)
        self.assertTrue(lines[0].startswith("memtrain: SIGTERM: stopping after step "), stderr)
        self.assertTrue(lines[1].startswith("memtrain: warning: "), stderr)
        self.assertIn("nothing will be saved", lines[1])
        self.assertTrue(lines[2].startswith("memtrain: error: stopped by SIGTERM"), stderr)
        self.assertFalse((out / "memory.json").exists(), "a run that saved nothing reported as finished")


if __name__ == "__main__":
    unittest.main(verbosity=2)
