#include "common/stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"

namespace lact {
namespace {

sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

}  // namespace

void BlockStopSignals(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  absl::InstallFailureSignalHandler({});
  const sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int WaitForStopSignal() {
  const sigset_t signals = StopSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

}  // namespace lact
