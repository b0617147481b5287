// Fault isolation: the sweep's worker process and the parent's side of the channel to it. One
// worker runs many cases (one JSON line per case each way over a Unix socket); a fault ends the
// worker, the case in flight becomes `error` with the reason, and the next case starts a new one.
#include "sweep/isolation.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/json_input.h"
#include "external/plugin_loader.h"
#include "report/case_json.h"
#include "run/case_checks.h"
#include "spec/contract.h"

namespace bitcheck {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* worker_label = "sweep worker channel";
// A worker asked to stop gets this long to write derived pins back and exit before it is killed.
constexpr auto worker_exit_grace = std::chrono::seconds(30);

// JSON lines on a stream socket. send() with MSG_NOSIGNAL: a peer that died is an error return,
// never a SIGPIPE that would end this process too.
bool write_line(int fd, const std::string& text) {
  std::string line = text + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// The next line (without its newline), or nullopt at end of stream, on an error, or when
// `timeout_seconds` (> 0) pass first (then *timed_out is set).
std::optional<std::string> read_line(int fd, std::string& buffer, double timeout_seconds = 0,
                                     bool* timed_out = nullptr) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (;;) {
    auto newline = buffer.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      return line;
    }
    if (timeout_seconds > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd waiting = {fd, POLLIN, 0};
      const int ready =
          left.count() > 0
              ? ::poll(&waiting, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)))
              : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        if (timed_out) *timed_out = true;
        return std::nullopt;
      }
    }
    char chunk[65536];
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

// Invalid UTF-8 in an error text must not make the result unsendable.
std::string dump_line(const nlohmann::json& document) {
  return document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A worker's reply, or a discarded value when it is no JSON the strict reader accepts (the caller
// reports it as unreadable).
nlohmann::json readable_reply(const std::string& line) {
  try {
    return parse_json_text(line, worker_label);
  } catch (const BadInput&) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int signal_number = WTERMSIG(status);
    return "was killed by signal " + std::to_string(signal_number) + " (" +
           signal_name(signal_number) + ": " + strsignal(signal_number) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

std::string signal_name(int signal_number) {
  static const std::pair<int, const char*> names[] = {
      {SIGSEGV, "SIGSEGV"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGILL, "SIGILL"},   {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},
      {SIGTRAP, "SIGTRAP"}, {SIGPIPE, "SIGPIPE"}, {SIGSYS, "SIGSYS"},   {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGHUP, "SIGHUP"},   {SIGQUIT, "SIGQUIT"},
  };
  for (const auto& [number, name] : names) {
    if (number == signal_number) return name;
  }
  return "signal " + std::to_string(signal_number);
}

CaseResult failed_case(const Registry& registry, const CaseSpec& spec, const std::string& reason,
                       double seconds) {
  CaseResult result;
  result.spec = spec;
  result.verdict = Verdict::error;
  result.reason = reason;
  if (const Impl* impl = registry.find_impl(spec.op, spec.impl)) {
    result.backend = impl->backend();
    result.is_control = !impl->claims_invariance();
    result.expected_to_drift = case_expected_to_drift(*impl, spec);
    result.is_observation = impl->is_library_default();
  }
  result.timings.total_seconds = seconds;
  return result;
}

CheckedCase run_case_checked(Runner& runner, const Registry& registry, const CaseSpec& spec) {
  auto start = Clock::now();
  CaseResult result;
  try {
    result = runner.run_case(spec);
  } catch (const std::exception& error) {
    return {failed_case(registry, spec, error.what(),
                        std::chrono::duration<double>(Clock::now() - start).count()),
            std::nullopt};
  }
  CheckedCase checked;
  // A kernel fault can surface after the impl returned (asynchronous work): asked after every
  // CUDA case that ran, so the fault is charged to the case that caused it.
  const DeviceBackend* device = registry.device_backend(result.backend);
  if (result.backend == "cuda" && device && result.verdict != Verdict::skipped) {
    checked.context_fault = device->context_fault();
    if (checked.context_fault && result.verdict != Verdict::error) {
      result.verdict = Verdict::error;
      result.reason = "the CUDA context was poisoned after the case ran: " + *checked.context_fault;
    }
  }
  checked.result = std::move(result);
  return checked;
}

IsolatedRunner::IsolatedRunner(const Registry& registry, WorkerSettings settings)
    : registry_(registry), settings_(std::move(settings)) {
  if (settings_.executable.empty())
    throw std::logic_error("fault isolation needs the bitcheck executable");
}

IsolatedRunner::~IsolatedRunner() {
  stop();
}

void IsolatedRunner::start_worker() {
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    throw std::runtime_error(std::string("cannot create the sweep worker's socket: ") +
                             std::strerror(errno));
  }
  // Everything the child needs is built before fork: between fork and exec only async-signal-safe
  // calls.
  const std::string fd_text = std::to_string(sockets[1]);
  // argv[0] names the binary (ps shows it), while exec goes through `executable` (/proc/self/exe).
  std::error_code unresolved;
  std::string shown = std::filesystem::read_symlink(settings_.executable, unresolved).string();
  std::vector<std::string> args = {shown.empty() ? settings_.executable : shown, "__sweep-worker",
                                   "--fd", fd_text};
  for (const auto& arg : external_impl_arguments()) args.push_back(arg);  // the same plugins
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const char* executable = settings_.executable.c_str();
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(sockets[0]);
    ::close(sockets[1]);
    throw std::runtime_error(std::string("cannot fork the sweep worker: ") + std::strerror(errno));
  }
  if (child == 0) {
    // Its own process group: a Ctrl-C at the terminal reaches the parent only, which finishes the
    // case in flight and stops. If the parent dies, the kernel ends the worker.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::fcntl(sockets[1], F_SETFD, 0);
    int null_input = ::open("/dev/null", O_RDONLY);
    if (null_input >= 0) ::dup2(null_input, STDIN_FILENO);
    // Stray output from an impl goes to stderr, never into the parent's stdout.
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int signal_number : {SIGINT, SIGTERM, SIGPIPE})
      ::sigaction(signal_number, &default_action, nullptr);
    ::execv(executable, argv.data());
    ::_exit(127);
  }
  ::close(sockets[1]);
  socket_ = sockets[0];
  pid_ = child;
  buffer_.clear();
  ++workers_started_;

  nlohmann::json hello = {{"contract", settings_.contract_path},
                          {"pins", settings_.run.pins},
                          {"write_pins", settings_.run.write_pins},
                          {"provenance", settings_.run.provenance}};
  std::optional<std::string> ready;
  if (write_line(socket_, dump_line(hello))) ready = read_line(socket_, buffer_);
  std::string problem;
  try {
    if (ready) {
      nlohmann::json reply = parse_json_text(*ready, worker_label);
      if (reply.value("ready", false)) return;
      problem = reply.value("startup_error", "it sent no ready line");
    }
  } catch (const std::exception&) {
    problem = "it sent an unreadable ready line";
  }
  std::string how = reap();
  throw std::runtime_error("cannot start the sweep worker (" + settings_.executable +
                           " __sweep-worker): " + (problem.empty() ? "it " + how : problem));
}

std::string IsolatedRunner::reap() {
  if (socket_ >= 0) ::close(socket_);
  socket_ = -1;
  if (pid_ < 0) return "was not running";
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  last_status_ = status;
  return describe_exit(status);
}

void IsolatedRunner::stop() {
  if (pid_ < 0) return;
  ::shutdown(socket_, SHUT_RDWR);  // end of input: the worker writes pins back and exits
  auto deadline = Clock::now() + worker_exit_grace;
  int status = 0;
  for (pid_t exited = 0; exited == 0 || (exited < 0 && errno == EINTR);
       exited = ::waitpid(pid_, &status, WNOHANG)) {
    if (Clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      reap();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(socket_);  // exited (and reaped above)
  socket_ = -1;
  pid_ = -1;
}

CaseResult IsolatedRunner::run_case(const CaseSpec& spec) {
  auto start = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  killed_from_outside_ = false;
  if (pid_ < 0) start_worker();
  CaseResult request_case;
  request_case.spec = spec;  // a skipped result's JSON is exactly the case's description
  std::optional<std::string> line;
  bool timed_out = false;
  if (write_line(socket_, dump_line({{"case", case_to_json(request_case)}})))
    line = read_line(socket_, buffer_, settings_.case_timeout_seconds, &timed_out);
  if (timed_out) {
    ++faults_;
    ::kill(pid_, SIGKILL);
    reap();
    std::ostringstream limit;
    limit << settings_.case_timeout_seconds;
    return failed_case(
        registry_, spec,
        "did not finish within the per-case limit of " + limit.str() +
            " s (--case-timeout): its worker process was killed and the sweep went on with the "
            "next case in a fresh worker",
        seconds());
  }
  if (!line) {
    ++faults_;
    const std::string ended = reap();
    killed_from_outside_ = WIFSIGNALED(last_status_) && WTERMSIG(last_status_) == SIGKILL;
    return failed_case(registry_, spec,
                       "the worker process running this case " + ended +
                           "; the sweep went on with the next case in a fresh worker",
                       seconds());
  }
  nlohmann::json reply = readable_reply(*line);
  if (!reply.is_object() || !reply.contains("result") || !reply["result"].is_object()) {
    ++faults_;
    std::string why =
        reply.is_object() && reply.contains("unreadable_request")
            ? "the worker process could not run this case: " + reply["unreadable_request"].dump()
            : std::string("the worker process sent an unreadable result for this case");
    ::kill(pid_, SIGKILL);
    reap();
    return failed_case(registry_, spec, why, seconds());
  }
  if (reply.contains("context_fault")) {
    ++faults_;
    reap();  // the worker exits after a sticky fault; the next case gets a fresh CUDA context
  }
  try {
    return case_from_json(JsonCursor(reply["result"], worker_label, "$.result"));
  } catch (const BadInput& error) {
    ++faults_;
    if (pid_ >= 0) ::kill(pid_, SIGKILL);
    reap();
    return failed_case(
        registry_, spec,
        std::string("the worker process sent an unreadable result for this case: ") + error.what(),
        seconds());
  }
}

int run_sweep_worker(const Registry& registry, int fd) {
  std::string buffer;
  std::optional<std::string> hello_line = read_line(fd, buffer);
  if (!hello_line) return exit_internal;
  std::optional<Contract> contract;
  try {
    nlohmann::json hello = parse_json_text(*hello_line, worker_label);
    start_run(registry, {hello.at("pins").get<std::string>(), hello.at("write_pins").get<bool>(),
                         hello.at("provenance").get<bool>()});
    contract = load_contract_or_embedded(hello.at("contract").get<std::string>(), registry);
  } catch (const std::exception& error) {
    write_line(fd, dump_line({{"startup_error", error.what()}}));
    return exit_internal;
  }
  Runner runner(registry, *contract);
  if (!write_line(fd, dump_line({{"ready", true}}))) return exit_internal;
  while (std::optional<std::string> line = read_line(fd, buffer)) {
    nlohmann::json reply;
    std::optional<std::string> context_fault;
    try {
      nlohmann::json request = parse_json_text(*line, worker_label);
      CaseSpec spec = case_spec_from_json(JsonCursor(request.at("case"), worker_label, "$.case"));
      if (spec.id() != request["case"].value("id", "")) {
        throw std::logic_error(
            "the case arrived as " + spec.id() + ", not as " + request["case"].value("id", "") +
            ": a field of CaseSpec is missing from case_to_json or case_spec_from_json");
      }
      CheckedCase checked = run_case_checked(runner, registry, spec);
      reply = {{"result", case_to_json(checked.result)}};
      if (checked.context_fault) reply["context_fault"] = *checked.context_fault;
      context_fault = checked.context_fault;
    } catch (const std::exception& error) {
      // Never a reply without a result: the parent records the case as error with this text.
      write_line(fd, dump_line({{"unreadable_request", error.what()}}));
      return exit_internal;
    }
    if (!write_line(fd, dump_line(reply))) return exit_internal;
    if (context_fault) {
      // No CUDA call can be trusted any more, not even the runtime's teardown: leave at once.
      finish_run(registry);
      std::_Exit(exit_internal);
    }
  }
  finish_run(registry);
  return exit_pass;
}

}  // namespace bitcheck
