#include "train/signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace mt {

namespace {

std::atomic<bool> stop_flag{false};

void on_stop_signal(int signal) {
  if (stop_flag.exchange(true)) _exit(128 + signal);
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

bool stop_requested() {
  return stop_flag.load();
}

}  // namespace mt
