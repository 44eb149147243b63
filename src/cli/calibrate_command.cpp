// `memtrain calibrate`: this machine's rates into a hardware profile JSON for `memtrain plan --profile`; with
// --device cuda, the GPU's into a GPU profile for `estimate` and `plan --gpu FILE`.
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "cli/commands.h"
#include "core/error.h"
#include "devices/devices.h"
#include "forecast/calibrate.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "memory/precision.h"

namespace mt::cli {

namespace {

// The runtime's overhead as a run measures it (train/device_memory_check.h (d): in use before the plan's
// first buffer), with the run's backend open (context, stream, cuBLASLt handle, staging) and no plan.
int64_t runtime_overhead(const DeviceTarget& target) {
  const std::unique_ptr<Backend> backend = make_backend(target, model_state_policy(PrecisionConfig{}));
  const std::optional<DeviceMemoryInfo> memory = backend->memory_info();
  if (!memory) throw std::runtime_error("calibrate: the GPU's driver did not report its memory");
  return memory->total_bytes - memory->free_bytes;
}

void calibrate_gpu_into(const std::string& device, const std::string& out, const CalibrateOptions& options) {
  const DeviceTarget target = open_device(device, process_threads());  // a usage error without a GPU
  check_output_file("--out", out);
  const GpuProfile profile = calibrate_gpu(target, runtime_overhead(target), options);
  const std::string text = gpu_profile_json(profile).dump(2) + "\n";
  write_file_atomically(out, text);
  std::printf("%s", text.c_str());
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto out = std::make_shared<std::string>("profile.json");
  auto device = std::make_shared<std::string>("cpu");
  auto options = std::make_shared<CalibrateOptions>();
  auto threads = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "measure the rates of the step's kernels, memory, MPI and disk bandwidth into a hardware profile, "
      "recording the ISA level the kernels ran at (this CPU's, capped by MEMTRAIN_MAX_ISA), the threads and "
      "the CPU model; with --device cuda, the GPU's memory, runtime overhead, product rates and memory "
      "bandwidth into a GPU profile for --gpu");
  cmd->add_option("--out", *out, "the profile JSON to write")->capture_default_str();
  cmd->add_option("--device", *device, "cpu, or cuda / cuda:N: measure that GPU (one process)")
      ->capture_default_str();
  cmd->add_option("--scratch-dir", options->scratch_dir, "directory for the disk test (an --offload-path)")
      ->capture_default_str();
  cmd->add_option("--seconds-per-test", options->seconds_per_test,
                  "how long each rate's repeats run; each rate is the fastest of them")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", *threads, "OpenMP threads, 0 = all cores (one per rank under mpirun)")
      ->capture_default_str();
  cmd->callback([out, device, options, threads] {
    auto comm = std::make_unique<AsyncCommunicator>(make_communicator(DistBackend::automatic));
    if (*threads < 0) fail_usage("--threads must be 0 (all cores) or positive");
    if (device_kind(*device) == DeviceKind::cuda) {
      check_device_ranks(*device, comm->size());
      return calibrate_gpu_into(*device, *out, *options);
    }
    // Ranks share the machine's cores: one thread each unless --threads says otherwise.
    open_device("cpu", *threads > 0 ? *threads : comm->size() > 1 ? 1 : process_threads());
    // Rank 0 writes it: checked before the minutes of measuring, not after.
    if (comm->rank() == 0) check_output_file("--out", *out);
    const HardwareProfile profile = calibrate(*comm, *options);
    if (comm->rank() != 0) return;
    const std::string text = hardware_profile_json(profile).dump(2) + "\n";
    write_file_atomically(*out, text);
    std::printf("%s", text.c_str());
  });
}

}  // namespace mt::cli
