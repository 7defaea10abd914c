// SIGINT/SIGTERM handling for the long-running processes: block the stop
// signals in every thread (call first thing in main, before any thread
// starts), then wait for one in the main thread and shut down cleanly.
// SIGPIPE is ignored: a peer that goes away is an error status, not a kill.
#ifndef LACT_COMMON_STOP_SIGNALS_H_
#define LACT_COMMON_STOP_SIGNALS_H_

namespace lact {

void BlockStopSignals();
// Returns the signal that arrived.
int WaitForStopSignal();

}  // namespace lact

#endif  // LACT_COMMON_STOP_SIGNALS_H_
