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

[[noreturn]] void exit_on_signal(int signal) {
  // write(2), strlen and constant text: this may run in a signal handler.
  const char* text = signal == SIGINT ? "memtrain: stopped by SIGINT\n" : "memtrain: stopped by SIGTERM\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
  _exit(128 + signal);
}

void on_stop_signal(int signal) {
  if (!stepping.load() || stop_flag.exchange(true)) exit_on_signal(signal);
  stop_signal_number.store(signal);
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

bool stop_requested() {
  return stop_flag.load();
}

int stop_signal() {
  return stop_signal_number.load();
}

}  // namespace mt
