"""Nothing a run or prepare writes is lost or overwritten (issue 31, items 7 and 8): --save-adapter and calibrate's
--out checked before any work, the adapter written from a checkpoint (export --adapter, equal bytes to
--save-adapter's) and by the requeue of a finished run, no directory inside a checkpoint (pruning would delete
it), a second prepare into a folder refused unless told to replace its shards, and adapter_config.json read
whole: what memtrain does not implement refused by key.

Runs the binary memtrain_cli.py names.
"""
import json
import shutil
import time

from memtrain_cli import memtrain, read_safetensors
from test_run_directories import RunDirCase, checkpoints, lock_held, step_name

LORA = {"lora_rank": 4, "lora_alpha": 8}
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


class OutputsCase(RunDirCase):
    def assert_same_files(self, got, want, names):
        for name in names:
            self.assertEqual((got / name).read_bytes(), (want / name).read_bytes(), f"{got / name} differs")


class CheckedBeforeWork(OutputsCase):
    def assert_refused_before_step_1(self, flags, *mentions):
        out = self.tmp / "run"
        result = self.train_in(out, expect=None, **flags)
        self.assert_error(result, 1, *mentions)
        self.assertNotIn("step     1", result.stdout)
        self.assertFalse(out.exists(), "a refused run left its --out")

    def test_a_save_adapter_that_cannot_be_written_is_refused_before_step_1(self):
        a_file = self.tmp / "a-file"
        a_file.write_text("not a directory")
        self.assert_refused_before_step_1({"save_adapter": a_file, **LORA}, f"--save-adapter {a_file}",
                                          "a directory is expected")
        self.assert_refused_before_step_1({"save_adapter": a_file / "adapter", **LORA}, "--save-adapter")
        read_only = self.mount_tmpfs(self.tmp / "ro", "ro,size=64k")
        self.assert_refused_before_step_1({"save_adapter": read_only / "adapter", **LORA}, "--save-adapter",
                                          "Read-only file system")

    def test_calibrate_out_is_checked_before_measuring(self):
        cases = [(self.tmp / "no-such-dir" / "profile.json", "does not exist"),
                 (self.tmp, "a directory, where a file is expected")]
        for path, what in cases:
            with self.subTest(path=path):
                began = time.monotonic()
                result = memtrain("calibrate", "--threads", 1, "--out", path)
                self.assert_error(result, 1, f"--out {path}", what)
                self.assertLess(time.monotonic() - began, 5, "calibrate measured before checking --out")
        read_only = self.mount_tmpfs(self.tmp / "ro", "ro,size=64k")
        result = memtrain("calibrate", "--threads", 1, "--out", read_only / "profile.json")
        self.assert_error(result, 1, "--out", "Read-only file system")


class AdapterFromCheckpoint(OutputsCase):
    def test_export_adapter_writes_what_save_adapter_wrote(self):
        save, adapter, exported = self.tmp / "ckpt", self.tmp / "adapter", self.tmp / "exported"
        self.train_in(self.tmp / "run", save=save, save_adapter=adapter, expect=0, **LORA)
        result = memtrain("export", save, "--adapter", "--out", exported)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("PEFT adapter files", result.stdout)
        self.assert_same_files(exported, adapter, ADAPTER_FILES)
        self.assertEqual(json.loads((exported / "adapter_config.json").read_text())["base_model_name_or_path"],
                         "gpt2-tiny")

    def test_export_adapter_needs_a_lora_checkpoint_and_excludes_merge_adapter(self):
        self.train_in(self.tmp / "full-run", save=self.tmp / "full", expect=0)
        self.assert_error(memtrain("export", self.tmp / "full", "--adapter", "--out", self.tmp / "a"), 2,
                          "--adapter", "not a LoRA checkpoint")
        self.train_in(self.tmp / "lora-run", save=self.tmp / "lora", expect=0, **LORA)
        result = memtrain("export", self.tmp / "lora", "--adapter", "--merge-adapter", "--out", self.tmp / "b")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--adapter", result.stderr)
        self.assert_error(memtrain("export", self.tmp / "lora", "--out", self.tmp / "c"), 2, "--merge-adapter",
                          "--adapter")
        self.assertFalse(any((self.tmp / d).exists() for d in ("a", "b", "c")))

    def test_the_requeue_of_a_finished_run_writes_a_missing_adapter(self):
        save, adapter = self.tmp / "ckpt", self.tmp / "adapter"
        flags = {"save": save, "save_adapter": adapter, "resume": "auto", **LORA}
        self.train_in(self.tmp / "run", expect=0, **flags)
        first = {name: (adapter / name).read_bytes() for name in ADAPTER_FILES}
        shutil.rmtree(adapter)
        again = self.train_in(self.tmp / "run", expect=0, **flags)
        self.assertIn("the run is complete", again.stdout)
        self.assertIn(f"wrote --save-adapter {adapter}", again.stdout)
        self.assertEqual({name: (adapter / name).read_bytes() for name in ADAPTER_FILES}, first)


class NoDirectoryInsideACheckpoint(OutputsCase):
    def test_a_save_or_out_inside_a_checkpoint_is_refused(self):
        save = self.tmp / "ckpt"
        self.train_in(self.tmp / "first", save=save, expect=0)
        inside = save / step_name(2) / "mine"
        for flags, flag in (({"save": inside}, "--save"), ({"out": inside}, "--out")):
            with self.subTest(flag=flag):
                out = flags.pop("out", self.tmp / "second")
                result = self.train_in(out, expect=None, **flags)
                self.assert_error(result, 1, f"{flag} {inside}", f"inside checkpoint {save / step_name(2)}")
                self.assertFalse(inside.exists())

    def test_pruning_keeps_a_checkpoint_that_holds_anything_else(self):
        save = self.tmp / "ckpt"
        flags = {"save": save, "save_interval": 1, "keep_checkpoints": 1, "resume": "auto"}
        self.train_in(self.tmp / "run", train_iters=1, expect=0, **flags)
        placed = save / step_name(1) / "someone-elses"  # made by hand: a run is refused there
        placed.mkdir()
        (placed / "notes.txt").write_text("kept")
        result = self.train_in(self.tmp / "run", train_iters=3, expect=0, **flags)
        self.assertEqual(checkpoints(save), [step_name(1), step_name(3)])
        self.assertEqual((placed / "notes.txt").read_text(), "kept")
        self.assertIn(f"kept checkpoint {save / step_name(1)}", result.stderr)
        self.assertIn("someone-elses", result.stderr)


class PrepareIntoAUsedFolder(OutputsCase):
    def prepare(self, text, out, *flags):
        return memtrain("prepare", text, "--tokenizer", "byte", "--min-val-tokens", 0, "--out", out, *flags)

    def test_a_second_prepare_is_refused_unless_told_to_replace_the_shards(self):
        first, second, out = self.tmp / "first.txt", self.tmp / "second.txt", self.tmp / "data"
        first.write_text("first " * 400)
        second.write_text("second " * 300)
        self.assertEqual(self.prepare(first, out).returncode, 0)
        kept = {p.name: p.read_bytes() for p in out.glob("*.bin")}
        self.assert_error(self.prepare(second, out), 1, f"--out {out}", "data_train_000000.bin",
                          "--overwrite-shards")
        self.assertEqual({p.name: p.read_bytes() for p in out.glob("*.bin")}, kept)
        # Another --name in the same folder is another data set: allowed.
        self.assertEqual(self.prepare(second, out, "--name", "other").returncode, 0)
        replaced = self.prepare(second, out, "--overwrite-shards")
        self.assertEqual(replaced.returncode, 0, replaced.stderr)
        self.assertNotEqual({p.name: p.read_bytes() for p in out.glob("data_*.bin")}, kept)

    def test_a_prepare_into_a_folder_in_use_is_refused(self):
        text, out = self.tmp / "t.txt", self.tmp / "data"
        text.write_text("words " * 300)
        with lock_held(out, "4242"):
            self.assert_error(self.prepare(text, out), 1, f"--out {out}", "pid 4242")
        self.assertEqual(list(out.glob("*.bin")), [])


class AdapterConfigKeys(OutputsCase):
    def adapter(self):
        adapter = self.tmp / "adapter"
        self.train_in(self.tmp / "trained", save_adapter=adapter, expect=0, **LORA)
        return adapter

    def test_keys_memtrain_does_not_implement_are_refused_by_name(self):
        adapter = self.adapter()
        config = json.loads((adapter / "adapter_config.json").read_text())
        for key, value in (("use_rslora", True), ("use_dora", True), ("alpha_pattern", {"c_attn": 16}),
                           ("rank_pattern", {"c_attn": 8}), ("layers_to_transform", [0]),
                           ("modules_to_save", ["ln_f"]), ("target_modules", ["c_attn"]),
                           ("target_modules", ["c_attn", "c_fc", "c_proj", "q_proj"]),
                           ("target_modules", ".*attn.*"), ("bias", "all"), ("a_future_key", 1)):
            with self.subTest(key=key, value=value):
                (adapter / "adapter_config.json").write_text(json.dumps({**config, key: value}))
                self.assert_train_fails(1, f"--init-adapter {adapter / 'adapter_config.json'}", f'"{key}"',
                                        init_adapter=adapter, **LORA)

    def test_unset_and_equivalent_values_are_accepted(self):
        adapter = self.adapter()
        config = json.loads((adapter / "adapter_config.json").read_text())
        for change in ({"use_rslora": False, "use_dora": False, "alpha_pattern": {}, "rank_pattern": {},
                        "layers_to_transform": None, "a_future_key": None},
                       {"target_modules": ["attn.c_attn", "mlp.c_fc", "c_proj"]}):
            with self.subTest(change=change):
                (adapter / "adapter_config.json").write_text(json.dumps({**config, **change}))
                self.train_in(self.tmp / "run", init_adapter=adapter, expect=0, **LORA)


if __name__ == "__main__":
    import unittest
    unittest.main(verbosity=2)
