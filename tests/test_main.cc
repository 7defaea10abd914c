// The main of every test binary. As in lact's own processes (see
// common/stop_signals.h), SIGPIPE is ignored: a peer that closes its socket
// while the code under test writes to it (Gloo writes with writev) is an
// error status for that code, not the end of the test process.
#include <gtest/gtest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
