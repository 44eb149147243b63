"""Planning for a GPU on a machine without one (issue 28): `estimate --device cuda --gpu NAME` is the GPU's
plan (256-byte alignment, cuBLASLt's planned workspace, the batch staged in pinned host memory) fitted with the
card's runtime overhead into its memory, and what the GPU backend does not run yet is refused by its flag. Runs
everywhere: nothing here needs a GPU.
"""
import json
import unittest

from memtrain_cli import CliTestCase, memtrain, run_flags

CUBLASLT_WORKSPACE = 32 << 20  # src/backend/cuda/cuda_backend.cpp
GRANULE = 2 << 20  # the device allocator's commit granularity (src/backend/cuda/allocator.cuh)


def estimate(*flags):
    result = memtrain("estimate", *run_flags(*flags), "--json")
    if result.returncode != 0:
        raise AssertionError(f"estimate {' '.join(map(str, flags))}: exit {result.returncode}: {result.stderr}")
    return json.loads(result.stdout)


class GpuPlan(CliTestCase):
    def test_the_gpu_plan_differs_from_the_cpu_plan_where_the_device_does(self):
        cpu = estimate("--bf16")
        gpu = estimate("--bf16", "--device", "cuda")
        self.assertEqual(gpu["device"], "cuda")
        cpu_rank, gpu_rank = cpu["ranks"][0], gpu["ranks"][0]
        # The model states are the device's own: the same bytes on both.
        for category in ("params", "master", "grads", "optim"):
            self.assertEqual(cpu_rank["bytes"][category], gpu_rank["bytes"][category], category)
        # The products' workspace is cuBLASLt's, planned.
        self.assertGreaterEqual(gpu_rank["bytes"]["workspace"], CUBLASLT_WORKSPACE)
        # The batch is staged in host memory (the host cannot write the GPU's): the GPU's host part is larger.
        self.assertGreater(sum(gpu_rank["host_bytes"].values()), sum(cpu_rank["host_bytes"].values()))
        self.assertEqual(gpu_rank["device_bytes"], gpu_rank["total_bytes"] - sum(gpu_rank["host_bytes"].values()))
        self.assertNotIn("device_bytes", cpu_rank)

    def test_a_card_adds_its_runtime_overhead_and_memory(self):
        plan = estimate("--bf16", "--device", "cuda", "--gpu", "h100")
        gpu = plan["gpu"]
        self.assertEqual((gpu["profile"], gpu["source"]), ("h100", "published"))
        self.assertEqual(plan["device_memory_bytes"], gpu["memory_bytes"])
        rank = plan["ranks"][0]
        # What the card must hold is what the driver commits for the plan's buffers, not their bytes.
        self.assertEqual(rank["headroom_bytes"],
                         gpu["memory_bytes"] - rank["device_committed_total_bytes"] - gpu["runtime_overhead_bytes"])
        self.assertTrue(plan["fits"])
        # --device-memory overrides the card's memory; the overhead still counts.
        tight = rank["device_committed_total_bytes"] + gpu["runtime_overhead_bytes"]
        self.assertTrue(estimate("--bf16", "--device", "cuda", "--gpu", "h100", "--device-memory", tight)["fits"])
        self.assertFalse(estimate("--bf16", "--device", "cuda", "--gpu", "h100", "--device-memory", tight - 1)["fits"])
        text = memtrain("estimate", *run_flags("--bf16", "--device", "cuda", "--gpu", "h200"))
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("runtime overhead", text.stdout)
        self.assertIn("NVIDIA H200", text.stdout)

    def test_the_plan_states_each_buffers_committed_bytes(self):
        plan = estimate("--bf16", "--device", "cuda", "--micro-batch-size", "3")
        self.assertEqual(plan["commit_granularity_bytes"], GRANULE)
        rank = plan["ranks"][0]
        buffers = rank["buffers"]
        # Every planned byte is in one of the buffers: the list is the whole plan.
        self.assertEqual(sum(b["bytes"] for b in buffers), rank["total_bytes"])
        self.assertEqual(sum(b["bytes"] for b in buffers if b["space"] == "host"), sum(rank["host_bytes"].values()))
        for b in buffers:
            if b["space"] == "device":
                self.assertEqual(b["committed_bytes"] % GRANULE, 0, b)
                self.assertLess(b["committed_bytes"] - b["bytes"], GRANULE, b)
            else:
                self.assertEqual(b["committed_bytes"], b["bytes"], b)  # pinned host memory, as asked
        device = [b for b in buffers if b["space"] == "device"]
        self.assertEqual(sum(b["committed_bytes"] for b in device), rank["device_committed_total_bytes"])
        for category, committed in rank["device_committed_bytes"].items():
            self.assertEqual(sum(b["committed_bytes"] for b in device if b["category"] == category), committed)
        self.assertGreater(rank["device_committed_total_bytes"], rank["device_bytes"])

    def test_what_the_gpu_does_not_run_is_refused_by_its_flag(self):
        for flags, mentions in [
            (["--gpu", "h100"], ["--gpu h100", "--device cuda"]),
            (["--device", "cuda", "--gpu", "v100"], ["--gpu v100", "a100-80gb, h100, h200"]),
            (["--device", "cuda", "--dp", "2"], ["--device cuda", "2 ranks", "one GPU"]),
            (["--device", "cuda", "--optimizer", "adam-mini"], ["--optimizer adam-mini", "not on the GPU yet"]),
            (["--device", "cuda:x"], ["--device cuda:x", "cpu, cuda or cuda:N"]),
            (["--tf32"], ["--tf32 with --device cpu", "--device cuda"]),
        ]:
            with self.subTest(flags=flags):
                self.assert_error(memtrain("estimate", *run_flags(*flags)), 2, *mentions)


if __name__ == "__main__":
    unittest.main()
