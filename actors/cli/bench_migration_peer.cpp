// `illm bench migration`'s peer process and the socket between it and the parent: frames of kind, length and
// payload (bench_migration_peer.hpp).
#include "actors/cli/bench_migration_peer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "actors/cli/commands.hpp"
#include "actors/logic/status_bridge.hpp"
#include "gpu/checksum.hpp"
#include "gpu/host_memory.hpp"

namespace illm::cli::migration {

namespace {

using gpu::checksum_seed;
using gpu::checksum_words;

constexpr uint64_t max_frame_bytes = uint64_t(1) << 20;

std::string errno_text(const char* what) {
  return fmt::format("{}: {}", what, std::strerror(errno));
}

// ---- The socket between parent and peer: frames of kind, length, payload ----------------------------

enum class frame_kind : uint32_t {
  ready = 1,     ///< peer -> parent: worker address and registered region
  error = 2,     ///< peer -> parent: why it could not start (text)
  checksum = 3,  ///< parent -> peer: checksum and clear [0, bytes) of the arena; peer -> parent: the sum
  stop = 4,      ///< parent -> peer: exit
};

struct frame {
  frame_kind kind{};
  std::vector<uint8_t> payload;
};

/// Appends and reads little pieces of a payload.
struct wire {
  std::vector<uint8_t> bytes;
  size_t at = 0;

  void put_u64(uint64_t v) {
    bytes.insert(bytes.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
  }
  void put_blob(const std::vector<uint8_t>& b) {
    put_u64(b.size());
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  bool get_u64(uint64_t& v) {
    if (bytes.size() - at < 8) return false;
    std::memcpy(&v, bytes.data() + at, 8);
    at += 8;
    return true;
  }
  bool get_blob(std::vector<uint8_t>& b) {
    uint64_t n = 0;
    if (!get_u64(n) || bytes.size() - at < n) return false;
    b.assign(bytes.begin() + long(at), bytes.begin() + long(at + n));
    at += n;
    return true;
  }
};

status write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);  // a closed peer is an error, not SIGPIPE
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return {status_code::io_error, errno_text("writing to the peer's socket")};
    p += k;
    n -= size_t(k);
  }
  return status::ok();
}

status write_frame(int fd, frame_kind kind, const std::vector<uint8_t>& payload) {
  uint8_t head[12];
  const auto k = uint32_t(kind);
  const uint64_t n = payload.size();
  std::memcpy(head, &k, 4);
  std::memcpy(head + 4, &n, 8);
  ILLM_RETURN_IF_ERROR(write_all(fd, head, sizeof head));
  return write_all(fd, payload.data(), payload.size());
}

/// Reads exactly n bytes before `deadline` (none: wait as long as it takes).
status read_all(int fd, void* data, size_t n, std::optional<bench_clock::time_point> deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    int timeout_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - bench_clock::now());
      if (left.count() <= 0) return {status_code::io_error, "timed out waiting for the peer"};
      timeout_ms = int(left.count());
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return {status_code::io_error, errno_text("waiting for the peer's socket")};
    if (ready == 0) continue;  // the deadline check above decides
    const ssize_t k = ::read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return {status_code::io_error, errno_text("reading the peer's socket")};
    if (k == 0) return {status_code::io_error, "the other side closed the socket"};
    p += k;
    n -= size_t(k);
  }
  return status::ok();
}

result<frame> read_frame(int fd, std::optional<bench_clock::time_point> deadline) {
  uint8_t head[12];
  ILLM_RETURN_IF_ERROR(read_all(fd, head, sizeof head, deadline));
  uint32_t kind = 0;
  uint64_t n = 0;
  std::memcpy(&kind, head, 4);
  std::memcpy(&n, head + 4, 8);
  if (n > max_frame_bytes) return status{status_code::io_error, fmt::format("a frame of {} bytes from the peer", n)};
  frame f{frame_kind(kind), std::vector<uint8_t>(n)};
  ILLM_RETURN_IF_ERROR(read_all(fd, f.payload.data(), n, deadline));
  return f;
}

}  // namespace

result<std::shared_ptr<transport::data_plane>> make_ucx_plane(const migration_flags& f, transport::peer_id self) {
  return transport::make_plane("ucx", {.self = self, .tls = f.tls, .net_devices = f.net_devices});
}

// ---- The peer ------------------------------------------------------------------------------------------

namespace {

/// Tells the parent why the peer cannot run, then ends the peer with an error.
[[noreturn]] void peer_fail(int fd, const std::string& why) {
  (void)write_frame(fd, frame_kind::error, std::vector<uint8_t>(why.begin(), why.end()));
  fail("bench migration peer: " + why);
}

/// Answers checksum requests until the parent says stop or goes away.
void serve_peer(int fd, uint8_t* arena, uint64_t arena_bytes) {
  for (;;) {
    auto f = read_frame(fd, std::nullopt);
    if (!f.is_ok() || f->kind == frame_kind::stop) return;  // a closed socket: the parent is gone
    wire in{std::move(f->payload)};
    uint64_t bytes = 0;
    if (f->kind != frame_kind::checksum || !in.get_u64(bytes) || bytes > arena_bytes)
      fail("bench migration peer: a malformed request from the parent");
    wire out;
    out.put_u64(checksum_words(arena, bytes, checksum_seed));
    std::memset(arena, 0, bytes);  // the next phase's puts must land for its checksum to match
    if (!write_frame(fd, frame_kind::checksum, out.bytes).is_ok()) return;
  }
}

}  // namespace

/// The peer: a plane with a registered arena, its progress thread receiving the parent's puts.
void run_peer(const migration_flags& f) {
  const int fd = f.peer_fd;
  if (f.arena_bytes == 0) peer_fail(fd, "no --arena-bytes");
  // The arena outlives the plane, which is destroyed (its progress thread stopped) first.
  gpu::host_array<uint8_t> arena(static_cast<uint8_t*>(gpu::host_alloc(f.arena_bytes)));
  if (!arena) peer_fail(fd, fmt::format("cannot allocate a {}-byte arena", f.arena_bytes));
  std::memset(arena.get(), 0, f.arena_bytes);  // pages in place before the first put, as a pool's are
  auto plane = make_ucx_plane(f, child_peer_id);
  if (!plane.is_ok()) peer_fail(fd, "creating the UCX plane: " + plane.error().message);
  auto region = plane.value()->register_memory(arena.get(), f.arena_bytes);
  if (!region.is_ok()) peer_fail(fd, "registering the arena: " + region.error().message);
  if (status s = plane.value()->start_progress_thread(); !s.is_ok()) peer_fail(fd, s.message);
  wire out;
  out.put_u64(region->address);
  out.put_u64(region->bytes);
  out.put_blob(region->packed_key);
  out.put_blob(plane.value()->address());
  if (!write_frame(fd, frame_kind::ready, out.bytes).is_ok()) return;
  serve_peer(fd, arena.get(), f.arena_bytes);
}

// ---- The parent's side of the peer ---------------------------------------------------------------------


namespace {

/// The peer's command line: this binary in its hidden peer mode, on socket `fd`.
std::vector<std::string> peer_arguments(const migration_flags& f, int fd) {
  const std::string bytes = std::to_string(f.arena_bytes), fd_text = std::to_string(fd);
  return {"illm", "bench", "migration", "--peer-fd",     fd_text,      "--arena-bytes",
          bytes,  "--tls", f.tls,       "--net-devices", f.net_devices};
}

}  // namespace

result<std::unique_ptr<peer_process>> peer_process::spawn(const migration_flags& f) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return status{status_code::io_error, errno_text("socketpair")};
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  std::vector<std::string> args = peer_arguments(f, sv[1]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    if (devnull >= 0) ::close(devnull);
    return status{status_code::io_error, errno_text("fork")};
  }
  if (pid == 0) exec_peer(parent, sv[1], devnull, argv.data());  // never returns
  ::close(sv[1]);
  if (devnull >= 0) ::close(devnull);
  return std::unique_ptr<peer_process>(new peer_process(pid, sv[0]));
}

peer_process::~peer_process() { (void)stop(); }

result<peer_ready> peer_process::wait_ready() {
  auto f = read_frame(fd_, bench_clock::now() + peer_ready_bound);
  if (!f.is_ok()) return status{status_code::io_error, "the peer did not start: " + f.error().message + exited()};
  if (f->kind == frame_kind::error)
    return status{status_code::io_error,
                  "the peer could not start: " + std::string(f->payload.begin(), f->payload.end())};
  wire in{std::move(f->payload)};
  peer_ready r;
  if (f->kind != frame_kind::ready || !in.get_u64(r.region.address) || !in.get_u64(r.region.bytes) ||
      !in.get_blob(r.region.packed_key) || !in.get_blob(r.worker_address))
    return status{status_code::io_error, "the peer's ready message is malformed"};
  return r;
}

result<uint64_t> peer_process::checksum(uint64_t bytes) {
  wire out;
  out.put_u64(bytes);
  ILLM_RETURN_IF_ERROR(write_frame(fd_, frame_kind::checksum, out.bytes));
  auto f = read_frame(fd_, bench_clock::now() + peer_reply_bound);
  if (!f.is_ok()) return status{status_code::io_error, "no checksum from the peer: " + f.error().message};
  wire in{std::move(f->payload)};
  uint64_t sum = 0;
  if (f->kind != frame_kind::checksum || !in.get_u64(sum))
    return status{status_code::io_error, "the peer's checksum reply is malformed"};
  return sum;
}

int peer_process::stop() {
  if (exit_code_) return *exit_code_;
  if (fd_ >= 0) {
    (void)write_frame(fd_, frame_kind::stop, {});
    ::close(fd_);  // and a peer that missed the stop sees the socket close
    fd_ = -1;
  }
  int st = 0;
  const auto deadline = bench_clock::now() + peer_exit_bound;
  pid_t got = 0;
  while ((got = ::waitpid(pid_, &st, WNOHANG)) == 0 && bench_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (got == 0) {
    ::kill(pid_, SIGKILL);
    got = ::waitpid(pid_, &st, 0);
  }
  exit_code_ = got < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return *exit_code_;
}

/// The child between fork and exec: only async-signal-safe calls.
void peer_process::exec_peer(pid_t parent, int fd, int devnull, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);                // never outlive the parent...
  if (::getppid() != parent) ::_exit(127);           // ...even one that died before the line above
  ::fcntl(fd, F_SETFD, 0);                           // this end of the socket survives exec
  if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);  // stdout is the parent's report
  ::execv("/proc/self/exe", argv);
  ::_exit(127);
}

/// ", exit status N" once the peer has exited (it is reaped then), else "".
std::string peer_process::exited() {
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) != pid_) return "";
  exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  ::close(fd_);
  fd_ = -1;
  return fmt::format(" (it exited with status {})", *exit_code_);
}

}  // namespace illm::cli::migration
