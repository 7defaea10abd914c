#include "client/local_cluster.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "common/status_macros.h"
#include "proto/auth.h"

extern char** environ;

namespace lact {
namespace {

std::string SelfDir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
}

// Spawns `args` with stdout to `stdout_fd` (-1: inherit).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& args, int stdout_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0)
    return absl::InternalError(absl::StrCat("cannot start ", args[0], ": ", std::strerror(err)));
  return pid;
}

// `secret` in a new file only this user can read; returns its path.
absl::StatusOr<std::string> WriteSecretFile(const std::string& secret) {
  std::string path = (std::filesystem::temp_directory_path() / "lact-secret-XXXXXX").string();
  const int fd = mkstemp(path.data());  // mode 0600
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create a secret file in ", path, ": ", std::strerror(errno)));
  }
  const std::string text = secret + "\n";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written) {
    unlink(path.c_str());
    return absl::InternalError(absl::StrCat("cannot write the secret file ", path));
  }
  return path;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    const pid_t r = waitpid(pid, nullptr, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  if (options.workers < 1)
    return absl::InvalidArgumentError("a local cluster needs at least 1 worker");
  const std::string bin = options.bin_dir.empty() ? SelfDir() : options.bin_dir;
  for (const char* name : {"lact-coordinator", "lact-worker"}) {
    if (access((bin + "/" + name).c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("cannot find ", name, " in ", bin));
    }
  }
  auto cluster = std::unique_ptr<LocalCluster>(new LocalCluster());
  LACT_ASSIGN_OR_RETURN(cluster->secret_file_, WriteSecretFile(RandomHex(32)));
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::InternalError("pipe failed");
  // Control on a port of its own, both guarded by a secret made for this
  // cluster: no other local user can register a worker or run its shards.
  std::vector<std::string> args = {
      bin + "/lact-coordinator", "--port", std::to_string(options.port),
      "--control-port",          "0",      "--cluster-secret-file",
      cluster->secret_file_};
  if (!options.data_root.empty()) args.insert(args.end(), {"--data-root", options.data_root});
  args.insert(args.end(), options.coordinator_args.begin(), options.coordinator_args.end());
  absl::StatusOr<pid_t> coordinator = Spawn(args, pipe_fds[1]);
  close(pipe_fds[1]);
  if (!coordinator.ok()) {
    close(pipe_fds[0]);
    return coordinator.status();
  }
  cluster->coordinator_ = *coordinator;
  FILE* out = fdopen(pipe_fds[0], "r");
  std::string& control_address = cluster->control_address_;
  char line[256] = {0};
  while ((cluster->address_.empty() || control_address.empty()) &&
         fgets(line, sizeof(line), out) != nullptr) {
    const std::string text(line);
    for (const auto& [marker, address] :
         {std::pair<std::string, std::string*>{"listening on ", &cluster->address_},
          {"control on ", &control_address}}) {
      if (text.find(marker) == std::string::npos) continue;
      *address = text.substr(text.find(marker) + marker.size());
      while (!address->empty() && isspace(address->back())) address->pop_back();
    }
  }
  fclose(out);
  if (cluster->address_.empty() || control_address.empty()) {
    return absl::UnavailableError("lact-coordinator did not start (see its error above)");
  }

  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads_per_worker > 0 ? options.threads_per_worker
                                                     : std::max(1, cores / options.workers);
  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> w = {bin + "/lact-worker",    "--coordinator",       control_address,
                                  "--cluster-secret-file", cluster->secret_file_, "--threads",
                                  std::to_string(threads)};
    if (!options.model_dir.empty()) {
      w.push_back("--model-dir");
      w.push_back(options.model_dir);
    }
    if (!options.data_root.empty()) w.insert(w.end(), {"--data-root", options.data_root});
    if (!options.devices.empty()) {
      w.push_back("--device");
      w.push_back(std::to_string(options.devices[i % options.devices.size()]));
    }
    w.insert(w.end(), options.worker_args.begin(), options.worker_args.end());
    LACT_ASSIGN_OR_RETURN(pid_t pid, Spawn(w, -1));
    cluster->workers_.push_back(pid);
  }
  LACT_RETURN_IF_ERROR(cluster->WaitForWorkers(options.workers, options.token));
  return cluster;
}

absl::Status LocalCluster::WaitForWorkers(int count, const std::string& token) {
  LactClient client(address_, token);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<std::vector<v1::ModelInfo>> models = client.ListModels();
    seen = 0;
    if (models.ok()) {
      for (const v1::ModelInfo& m : *models) seen = std::max(seen, m.workers());
    }
    if (seen >= count) return absl::OkStatus();
    for (pid_t& pid : workers_) {
      if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;  // reaped: never signal this number again
        return absl::UnavailableError("a lact-worker exited during start-up (see its error above)");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("only ", seen, " of ", count, " workers registered within 60 s"));
}

void LocalCluster::KillWorker(int i) {
  kill(workers_[i], SIGKILL);
  waitpid(workers_[i], nullptr, 0);
  workers_[i] = -1;
}

void LocalCluster::SignalWorker(int i, int signal) {
  if (workers_[i] > 0) kill(workers_[i], signal);
}

LocalCluster::~LocalCluster() {
  for (pid_t pid : workers_) Stop(pid);
  Stop(coordinator_);
  if (!secret_file_.empty()) unlink(secret_file_.c_str());
}

}  // namespace lact
