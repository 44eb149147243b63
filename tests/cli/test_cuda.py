"""Training on one NVIDIA GPU against the CPU (issue 28; CTest label `cuda`): tiny GPT-2 and LLaMA a few steps
on both (and as QLoRA, over an nf4 or int8 base), the GPU twice bit for bit, recompute modes bit for bit, a GPU
run resumed bit for bit, checkpoints crossing between GPU and CPU, and the memory proof: planned == measured,
the driver's free memory dropping by exactly what the plan's buffers committed, and not moving from step 2 on.
Without a GPU (or a build without CUDA) it exits 77, which CTest reports as skipped.
"""
import ctypes
import json
import sys
import unittest

from memtrain_cli import ResumeTestCase, memtrain, read_memory, read_metrics, run_flags

# fp32 products run without TF32 (no --tf32), so the GPU follows the CPU closely; 16-bit storage rounds
# differently where the order of the sums differs.
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "bf16-int8": 2e-2}
PRECISION = {"fp32": [], "bf16": ["--bf16"],
             "bf16-int8": ["--bf16", "--exp-avg-dtype", "int8", "--exp-avg-sq-dtype", "int8"]}
MODELS = ("gpt2-tiny", "llama-tiny")


def gpu_missing():
    """Why this machine cannot train on a GPU, or None: a build without CUDA, or no driver or device."""
    if memtrain("estimate", "--model", "gpt2-tiny", "--device", "cuda").returncode != 0:
        return "this memtrain was built without CUDA"
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1)"
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no GPU found"
    return None


class OnTheGpu(ResumeTestCase):
    def losses(self, out):
        return [(r["loss"], r.get("grad_norm")) for r in read_metrics(out)]

    def run_on(self, device, name, *flags, iters=4):
        out = self.tmp / f"{name}-{device.replace(':', '')}"
        self.train(out, "--device", device, *flags, iters=iters)
        return out

    def test_follows_the_cpu(self):
        for model in MODELS:
            for precision, flags in PRECISION.items():
                with self.subTest(model=model, precision=precision):
                    cpu = self.run_on("cpu", f"{model}-{precision}", "--model", model, *flags)
                    gpu = self.run_on("cuda", f"{model}-{precision}", "--model", model, *flags)
                    got, want = self.losses(gpu), self.losses(cpu)
                    self.assertEqual(len(got), len(want))
                    for step, ((a, _), (b, _)) in enumerate(zip(got, want), 1):
                        self.assertAlmostEqual(a, b, delta=TOLERANCE[precision] * abs(b), msg=f"step {step}")

    def test_qlora_follows_the_cpu(self):
        # Both quantize the base with the CPU's quantizer and dequantize it to the same bits, so only the
        # products' order of sums differs; the GPU's plan holds its 1024-column dequantization tiles.
        lora = ["--lora-rank", "4", "--lora-target", "all-linear"]
        for model in MODELS:
            for quant in (["--base-quant", "nf4"], ["--base-quant", "int8", "--no-double-quant"]):
                for precision in ("fp32", "bf16"):
                    with self.subTest(model=model, quant=quant[1], precision=precision):
                        name = f"{model}-{quant[1]}-{precision}"
                        flags = ["--model", model, *lora, *quant, *PRECISION[precision]]
                        cpu = self.run_on("cpu", f"qlora-{name}", *flags)
                        gpu = self.run_on("cuda", f"qlora-{name}", *flags)
                        memory = read_memory(gpu)
                        self.assertEqual(memory["planned"], memory["measured"])
                        got, want = self.losses(gpu), self.losses(cpu)
                        self.assertEqual(len(got), len(want))
                        for step, ((a, _), (b, _)) in enumerate(zip(got, want), 1):
                            self.assertAlmostEqual(a, b, delta=TOLERANCE[precision] * abs(b), msg=f"step {step}")

    def test_twice_is_bitwise_and_recompute_changes_nothing(self):
        for model in MODELS:
            with self.subTest(model=model):
                first = self.run_on("cuda", f"{model}-a", "--model", model, "--bf16")
                second = self.run_on("cuda", f"{model}-b", "--model", model, "--bf16")
                self.assertEqual(self.losses(first), self.losses(second))
                for mode in (["--recompute-granularity", "selective"],
                             ["--recompute-granularity", "full", "--recompute-method", "uniform",
                              "--recompute-num-layers", "1"]):
                    again = self.run_on("cuda", f"{model}-{mode[1]}", "--model", model, "--bf16", *mode)
                    self.assertEqual(self.losses(again), self.losses(first), mode)

    def test_the_memory_proof(self):
        out = self.run_on("cuda", "memory", "--model", "gpt2-tiny", "--bf16", iters=5)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])
        proof = memory["device_memory"]
        self.assertTrue(proof["allocation_matches_commit"], proof)
        self.assertTrue(proof["free_steady"], proof)
        self.assertEqual(proof["steps_checked"], 4)
        self.assertGreater(proof["runtime_overhead_bytes"], 0)
        # (b) in numbers: the driver took what the plan said its buffers commit, before any was made.
        flags = run_flags("--model", "gpt2-tiny", "--bf16", "--device", "cuda", data=self.data)
        estimate = json.loads(memtrain("estimate", *flags, "--json").stdout)
        committed = estimate["ranks"][0]["device_committed_total_bytes"]
        self.assertEqual(proof["planned_committed_bytes"], committed)
        self.assertEqual(proof["committed_bytes"], committed)
        self.assertEqual(proof["allocation_drop_bytes"], committed)

    def test_tf32_is_asked_for(self):
        # TF32 rounds the fp32 products' inputs to 10 mantissa bits: the losses move, within bf16's tolerance.
        exact = self.run_on("cuda", "fp32", "--model", "gpt2-tiny")
        tf32 = self.run_on("cuda", "tf32", "--model", "gpt2-tiny", "--tf32")
        got, want = self.losses(tf32), self.losses(exact)
        self.assertNotEqual(got, want)
        for step, ((a, _), (b, _)) in enumerate(zip(got, want), 1):
            self.assertAlmostEqual(a, b, delta=TOLERANCE["bf16"] * abs(b), msg=f"step {step}")

    def test_verify_resume_on_the_gpu(self):
        self.train(self.tmp / "verify", "--device", "cuda", "--bf16", "--verify-resume", "2", iters=4)

    def test_resumes_bitwise(self):
        self.assert_bitwise("resume", ["--device", "cuda", "--bf16"])

    def test_checkpoints_cross_between_gpu_and_cpu(self):
        for first, then in (("cuda", "cpu"), ("cpu", "cuda")):
            with self.subTest(first=first, then=then):
                straight, split = self.uninterrupted_and_resumed(
                    f"{first}-{then}", ["--device", first], resume_flags=["--device", then])
                self.assert_close([r["loss"] for r in read_metrics(split)],
                                  [r["loss"] for r in read_metrics(straight)], tolerance=TOLERANCE["fp32"])


if __name__ == "__main__":
    missing = gpu_missing()
    if missing:
        print(f"skipped: {missing}")
        sys.exit(77)
    unittest.main()
