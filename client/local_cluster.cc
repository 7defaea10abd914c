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
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/lact_client.h"
#include "client/local_credentials.h"
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

// A new folder only this user can open; returns its path.
absl::StatusOr<std::string> MakePrivateDir() {
  std::string path = (std::filesystem::temp_directory_path() / "lact-local-XXXXXX").string();
  if (mkdtemp(path.data()) == nullptr) {  // mode 0700
    return absl::InternalError(
        absl::StrCat("cannot create a folder in ", path, ": ", std::strerror(errno)));
  }
  return path;
}

// Whether folder `outer` (empty: none) holds `path`.
bool Contains(const std::string& outer, const std::string& path) {
  if (outer.empty()) return false;
  std::error_code error;
  const std::string o = std::filesystem::weakly_canonical(outer, error).string();
  const std::string p = std::filesystem::weakly_canonical(path, error).string();
  return p == o || absl::StartsWith(p, o == "/" ? o : o + "/");
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  return text.str();
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

namespace {

// The flags every process of the cluster gets: the cluster's secret, the
// spool, TLS and metrics.
struct CommonArgs {
  std::string secret_file;
  std::vector<std::string> spool, tls, metrics;
};

// In-band contexts are spooled in the cluster's folder, so a job whose
// worker dies runs again; not when the data root holds that folder.
std::vector<std::string> SpoolArgs(const LocalClusterOptions& options, const std::string& dir) {
  const std::string spool_dir = dir + "/spool";
  if (!options.spool) return {};
  if (!Contains(options.data_root, spool_dir)) return {"--spool-dir", spool_dir};
  std::fprintf(stderr,
               "lact local: --data-root %s holds the cluster's folder %s; in-band contexts are "
               "not spooled (jobs could name them by reference)\n",
               options.data_root.c_str(), dir.c_str());
  return {};
}

std::vector<std::string> WorkerCommand(const LocalClusterOptions& options, const std::string& bin,
                                       const std::string& control, const CommonArgs& common, int i,
                                       int threads) {
  std::vector<std::string> w = {bin + "/lact-worker",    "--coordinator",    control,
                                "--cluster-secret-file", common.secret_file, "--threads",
                                std::to_string(threads)};
  w.insert(w.end(), common.spool.begin(), common.spool.end());
  w.insert(w.end(), common.tls.begin(), common.tls.end());
  w.insert(w.end(), common.metrics.begin(), common.metrics.end());
  if (!options.model_dir.empty()) w.insert(w.end(), {"--model-dir", options.model_dir});
  if (!options.data_root.empty()) w.insert(w.end(), {"--data-root", options.data_root});
  if (!options.devices.empty()) {
    w.push_back("--device");
    w.push_back(std::to_string(options.devices[i % options.devices.size()]));
  }
  w.insert(w.end(), options.worker_args.begin(), options.worker_args.end());
  return w;
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
  LACT_ASSIGN_OR_RETURN(cluster->dir_, MakePrivateDir());
  // Control on a port of its own, both guarded by a secret made for this
  // cluster: no other local user can register a worker or run its shards.
  CommonArgs common{.secret_file = cluster->dir_ + "/cluster-secret"};
  LACT_RETURN_IF_ERROR(WriteTextFile(common.secret_file, RandomHex(32) + "\n"));
  if (options.tls) {
    LACT_ASSIGN_OR_RETURN(LocalCredentials files, MakeLocalCredentials(cluster->dir_));
    common.tls = {"--tls-cert",   files.cert_file, "--tls-key",
                  files.key_file, "--tls-ca",      files.ca_file};
    LACT_ASSIGN_OR_RETURN(cluster->security_.tls_roots, ReadTextFile(files.ca_file));
    cluster->tls_ca_file_ = files.ca_file;
  }
  cluster->security_.token = options.token;
  common.spool = SpoolArgs(options, cluster->dir_);
  // Every process serves its metrics on a free port (lact workers lists the workers').
  if (options.metrics) common.metrics = {"--metrics-port", "0"};
  std::vector<std::string> args = {"--port", std::to_string(options.port), "--control-port",
                                   "0",      "--cluster-secret-file",      common.secret_file};
  for (const auto* more : {&common.spool, &common.tls, &common.metrics})
    args.insert(args.end(), more->begin(), more->end());
  if (!options.data_root.empty()) args.insert(args.end(), {"--data-root", options.data_root});
  args.insert(args.end(), options.coordinator_args.begin(), options.coordinator_args.end());
  cluster->coordinator_binary_ = bin + "/lact-coordinator";
  LACT_RETURN_IF_ERROR(cluster->StartCoordinator(args));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads_per_worker > 0 ? options.threads_per_worker
                                                     : std::max(1, cores / options.workers);
  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> w =
        WorkerCommand(options, bin, cluster->control_address_, common, i, threads);
    LACT_ASSIGN_OR_RETURN(pid_t pid, Spawn(w, -1));
    cluster->workers_.push_back(pid);
    cluster->worker_commands_.push_back(std::move(w));
  }
  LACT_RETURN_IF_ERROR(cluster->WaitForWorkers(options.workers));
  return cluster;
}

absl::Status LocalCluster::WaitForWorkers(int count) {
  LactClient client(address_, security_);
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

absl::Status LocalCluster::StartCoordinator(std::vector<std::string> args) {
  coordinator_args_ = args;
  args.insert(args.begin(), coordinator_binary_);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return absl::InternalError("pipe failed");
  absl::StatusOr<pid_t> coordinator = Spawn(args, pipe_fds[1]);
  close(pipe_fds[1]);
  if (!coordinator.ok()) {
    close(pipe_fds[0]);
    return coordinator.status();
  }
  coordinator_ = *coordinator;
  FILE* out = fdopen(pipe_fds[0], "r");
  address_.clear();
  control_address_.clear();
  metrics_address_.clear();
  char line[256] = {0};
  while ((address_.empty() || control_address_.empty()) &&
         fgets(line, sizeof(line), out) != nullptr) {
    const std::string text(line);
    for (const auto& [marker, address] :
         {std::pair<std::string, std::string*>{"listening on ", &address_},
          {"control on ", &control_address_},
          {"metrics on ", &metrics_address_}}) {
      if (text.find(marker) == std::string::npos) continue;
      *address = text.substr(text.find(marker) + marker.size());
      while (!address->empty() && isspace(address->back())) address->pop_back();
    }
  }
  fclose(out);
  if (address_.empty() || control_address_.empty()) {
    return absl::UnavailableError("lact-coordinator did not start (see its error above)");
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartCoordinator() {
  KillCoordinator();
  return StartCoordinatorAgain();
}

void LocalCluster::KillCoordinator() {
  if (coordinator_ <= 0) return;
  kill(coordinator_, SIGKILL);
  waitpid(coordinator_, nullptr, 0);
  coordinator_ = -1;
}

absl::Status LocalCluster::StartCoordinatorAgain() {
  if (coordinator_ > 0) return absl::FailedPreconditionError("the coordinator runs");
  // The same flags, on the ports it had: the workers and clients know them.
  std::vector<std::string> args = coordinator_args_;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    const std::string& address = args[i] == "--port"           ? address_
                                 : args[i] == "--control-port" ? control_address_
                                                               : std::string();
    if (!address.empty()) args[i + 1] = address.substr(address.rfind(':') + 1);
  }
  const std::string address = address_, control_address = control_address_;
  LACT_RETURN_IF_ERROR(StartCoordinator(args));
  if (address_ != address || control_address_ != control_address) {
    return absl::InternalError("the restarted coordinator did not get its old ports");
  }
  return WaitForWorkers(static_cast<int>(workers_.size()));
}

absl::Status LocalCluster::RestartWorker(int i, bool await_registration) {
  if (workers_[i] > 0) KillWorker(i);
  LACT_ASSIGN_OR_RETURN(workers_[i], Spawn(worker_commands_[i], -1));
  if (!await_registration) return absl::OkStatus();
  return WaitForWorkers(static_cast<int>(workers_.size()));
}

void LocalCluster::KillWorker(int i) {
  kill(workers_[i], SIGKILL);
  waitpid(workers_[i], nullptr, 0);
  workers_[i] = -1;
}

void LocalCluster::SignalWorker(int i, int signal) {
  if (workers_[i] > 0) kill(workers_[i], signal);
}

void LocalCluster::SignalCoordinator(int signal) {
  if (coordinator_ > 0) kill(coordinator_, signal);
}

namespace {

// Whether `*pid` exits within `wait` (then reaped, and set to -1).
bool Exits(pid_t* pid, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (*pid > 0) {
    if (waitpid(*pid, nullptr, WNOHANG) == *pid) {
      *pid = -1;
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

bool LocalCluster::WorkerExits(int i, std::chrono::milliseconds wait) {
  return Exits(&workers_[i], wait);
}

bool LocalCluster::CoordinatorExits(std::chrono::milliseconds wait) {
  return Exits(&coordinator_, wait);
}

LocalCluster::~LocalCluster() {
  for (pid_t pid : workers_) Stop(pid);
  Stop(coordinator_);
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

}  // namespace lact
