#include "train/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

namespace mt {

namespace {

std::atomic<bool> stop_flag{false};
std::atomic<bool> stepping{false};  // begin_steps was called: a first signal waits for the step to end
std::atomic<int> stop_signal_number{0};
std::atomic<const char*> stop_warning{nullptr};  // begin_steps' text, said when a first signal arrives
// The step in progress and its micro-batch (1-based) of how many, for the first signal's message.
std::atomic<int64_t> progress_step{0}, progress_micro_batch{0}, progress_micro_batches{0};

[[noreturn]] void exit_on_signal(int signal) {
  // write(2), strlen and constant text: this may run in a signal handler.
  const char* text = signal == SIGINT ? "memtrain: stopped by SIGINT\n" : "memtrain: stopped by SIGTERM\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
  _exit(128 + signal);
}

// Appends n in decimal to text at *length (async-signal-safe: no stdio).
void append_number(char* text, size_t& length, long long n) {
  char digits[24];
  size_t count = 0;
  do digits[count++] = static_cast<char>('0' + n % 10);
  while ((n /= 10) > 0);
  while (count > 0) text[length++] = digits[--count];
}

void append_text(char* text, size_t& length, const char* part) {
  for (; *part != '\0'; ++part) text[length++] = *part;
}

// The first signal during the steps, said at once: a step of many micro-batches can take long to finish.
// write(2) only: this may run in a signal handler.
void say_stop_requested(int signal) {
  char text[256];
  size_t length = 0;
  append_text(text, length, signal == SIGINT ? "memtrain: SIGINT" : "memtrain: SIGTERM");
  append_text(text, length, ": stopping after step ");
  append_number(text, length, progress_step.load());
  append_text(text, length, ", which is at micro-batch ");
  append_number(text, length, progress_micro_batch.load());
  append_text(text, length, " of ");
  append_number(text, length, progress_micro_batches.load());
  append_text(text, length, "; send it again to stop at once\n");
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, text, length);
}

void on_stop_signal(int signal) {
  if (!stepping.load() || stop_flag.exchange(true)) exit_on_signal(signal);
  stop_signal_number.store(signal);
  say_stop_requested(signal);
  if (const char* text = stop_warning.load()) {
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
  }
}

}  // namespace

void catch_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    // Threads that libraries started before us (OpenBLAS's pool, idle here) may still take a signal: the
    // same handler runs there.
    struct sigaction action = {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    std::thread([stop_signals] {
      while (true) {
        int signal = 0;
        if (sigwait(&stop_signals, &signal) == 0) on_stop_signal(signal);
      }
    }).detach();
  });
}

void begin_steps(const char* warning) {
  stop_warning.store(warning);
  stepping.store(true);
}

void report_step_progress(int64_t step, int64_t micro_batch, int64_t micro_batches) {
  progress_micro_batches.store(micro_batches);
  progress_micro_batch.store(micro_batch);
  progress_step.store(step);
}

bool stop_requested() {
  return stop_flag.load();
}

int stop_signal() {
  return stop_signal_number.load();
}

}  // namespace mt
