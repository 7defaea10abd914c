// SIGINT/SIGTERM handling for the long-running processes: block the stop
// signals in every thread (call first thing in main, before any thread
// starts), then wait for one in the main thread and shut down cleanly.
// SIGPIPE is ignored: a peer that goes away is an error status, not a kill.
// A fatal signal (SIGSEGV, SIGABRT, ...) prints the failing thread's stack
// to stderr before the process dies, so a crash in the field says where.
#ifndef LACT_COMMON_STOP_SIGNALS_H_
#define LACT_COMMON_STOP_SIGNALS_H_

namespace lact {

// `argv0` is main's argv[0] (for the stack's symbols).
void BlockStopSignals(const char* argv0);
// Returns the signal that arrived.
int WaitForStopSignal();

}  // namespace lact

#endif  // LACT_COMMON_STOP_SIGNALS_H_
