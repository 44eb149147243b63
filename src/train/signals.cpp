#include "train/signals.h"

#include <csignal>

namespace mt {

namespace {

volatile std::sig_atomic_t stop_flag = 0;

void on_stop_signal(int) {
  stop_flag = 1;
}

}  // namespace

void catch_stop_signals() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // the handler runs once; the next signal has its default effect
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_requested() {
  return stop_flag != 0;
}

}  // namespace mt
