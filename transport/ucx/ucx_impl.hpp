#pragma once
// The UCX side of ucx_plane, shared by ucx_plane.cpp (the data_plane calls) and ucx_worker.cpp (the worker,
// its endpoints, completions and progress). Internal to transport/ucx/.

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "transport/ucx/ucx_plane.hpp"

namespace illm::transport {
namespace ucx_detail {

/// The status of a UCX error, with UCX's own text after `what`.
inline status from_ucs(ucs_status_t st, const std::string& what) {
  status_code code = status_code::backend_error;
  switch (st) {
    case UCS_ERR_INVALID_PARAM:
      code = status_code::invalid_argument;
      break;
    case UCS_ERR_NO_MEMORY:
      code = status_code::out_of_memory;
      break;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_RESOURCE:
      code = status_code::unsupported;
      break;
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_CANCELED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      code = status_code::io_error;
      break;
    default:
      break;
  }
  return {code, fmt::format("{}: {}", what, ucs_status_string(st))};
}

inline const char* channel_name(channel ch) {
  return ch == channel::attend ? "attend" : "partials";
}

inline bool valid_channel(channel ch) {
  return ch == channel::attend || ch == channel::partials;
}

/// Checks a put against the region the peer described, before anything reaches UCX.
inline status check_put(const void* local, uint64_t bytes, const remote_region& region, uint64_t address) {
  if (local == nullptr && bytes > 0) return {status_code::invalid_argument, "put from a null buffer"};
  if (region.packed_key.empty()) return {status_code::invalid_argument, "put into a region without a remote key"};
  if (address < region.address || bytes > region.bytes || address - region.address > region.bytes - bytes)
    return {status_code::invalid_argument, fmt::format("put of {} bytes at {:#x} outside the region [{:#x}, +{})",
                                                       bytes, address, region.address, region.bytes)};
  return status::ok();
}

// The planes whose callbacks this thread is running now (their progress() from there does nothing).
inline thread_local std::vector<const void*> dispatching;

}  // namespace ucx_detail

struct ucx_plane::impl {
  enum class kind { put, flush, send };

  /// One put, flush or send in flight: the request's user data.
  struct op {
    impl* owner;
    kind what;
    peer_id peer;
    uint64_t bytes = 0;
    channel ch = channel::attend;
    completion done;
    uint32_t header = 0;           // the sender's id; UCX reads it until the send completes
    std::vector<uint8_t> payload;  // a send's own copy, valid until it completes
  };

  /// A rendezvous message being received into its buffer.
  struct incoming {
    impl* owner;
    peer_id from;
    channel ch;
    std::vector<uint8_t> payload;
  };

  /// One endpoint: the error handler's argument, so it lives until the plane dies.
  struct peer_state {
    impl* owner;
    peer_id id;
    ucp_ep_h ep = nullptr;
    bool failed = false;
    status failure;
    std::map<std::string, ucp_rkey_h> rkeys;  // by packed key (its bytes), unpacked once
  };

  /// The argument of a channel's active-message handler.
  struct am_context {
    impl* owner;
    channel ch;
  };

  ucx_options options;
  peer_id self_id;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  std::vector<uint8_t> address;

  // Guards every UCP call and everything below it.
  mutable std::mutex mutex;
  std::map<peer_id, std::unique_ptr<peer_state>> peers;
  std::vector<std::unique_ptr<peer_state>> retired;  // replaced or closed endpoints
  std::vector<peer_state*> to_close;                 // failed, closed after the progress call
  std::vector<void*> closing;                        // close requests not yet complete
  std::vector<ucp_mem_h> regions;
  std::vector<std::function<void()>> ready;  // callbacks to run outside the lock, in order
  message_handler handlers[3];
  peer_error_handler peer_error;
  am_context am[3];
  traffic sent;
  uint64_t rendezvous = 0;
  uint32_t in_flight = 0;

  std::mutex dispatch;  // one thread at a time runs callbacks, so they keep UCX's order
  std::thread progress_thread;
  std::atomic<bool> running{false};  // the progress thread exists (read by callers' threads)
  std::atomic<bool> stopping{false};

  impl(peer_id id, ucx_options opts) : options(std::move(opts)), self_id(id) {}

  status init();
  void shutdown();
  status install_am_handler(channel ch);

  // Everything below runs with `mutex` held.
  status usable_peer(peer_id peer, peer_state*& out);
  status rkey_for(peer_state& p, const std::vector<uint8_t>& packed, ucp_rkey_h& out);
  ucp_request_param_t param_for(op* o);
  void issued(op* o, ucs_status_ptr_t request);
  /// Issues one operation to `peer` under the lock: `issue(peer_state&)` runs (and returns its status) when
  /// the peer is usable and the in-flight limit allows; `done` hears a refusal, else the progress thread wakes.
  template <class Issue>
  void submit(peer_id peer, completion& done, Issue issue);
  void finish(op* o, ucs_status_t st);
  void fail_peer(peer_state& p, ucs_status_t st);
  void close_endpoint(peer_state& p);
  void close_failed();
  void reap_closing();
  ucs_status_t receive(channel ch, const void* header, size_t header_bytes, void* data, size_t bytes,
                       const ucp_am_recv_param_t* param);
  void deliver(peer_id from, channel ch, std::vector<uint8_t> payload);

  unsigned progress();
  void progress_loop();
  void wake() {
    if (running) ucp_worker_signal(worker);  // safe from any thread
  }
};

namespace ucx_detail {

// UCX's callbacks: they hand what completed or arrived to the plane.

inline void on_send_done(void* request, ucs_status_t st, void* user_data) {
  auto* o = static_cast<ucx_plane::impl::op*>(user_data);
  o->owner->finish(o, st);
  ucp_request_free(request);
}

inline void on_recv_done(void* request, ucs_status_t st, size_t length, void* user_data) {
  auto* in = static_cast<ucx_plane::impl::incoming*>(user_data);
  if (st == UCS_OK) {
    in->payload.resize(length);
    in->owner->deliver(in->from, in->ch, std::move(in->payload));
  }
  delete in;
  ucp_request_free(request);
}

inline void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t st) {
  auto* p = static_cast<ucx_plane::impl::peer_state*>(arg);
  p->owner->fail_peer(*p, st);
}

inline ucs_status_t on_active_message(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                               const ucp_am_recv_param_t* param) {
  auto* c = static_cast<ucx_plane::impl::am_context*>(arg);
  return c->owner->receive(c->ch, header, header_bytes, data, bytes, param);
}

}  // namespace ucx_detail

}  // namespace illm::transport
