#include "transport/ucx/ucx_plane.hpp"

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

namespace illm::transport {

namespace {

/// The status of a UCX error, with UCX's own text after `what`.
status from_ucs(ucs_status_t st, const std::string& what) {
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

const char* channel_name(channel ch) {
  return ch == channel::attend ? "attend" : "partials";
}

bool valid_channel(channel ch) {
  return ch == channel::attend || ch == channel::partials;
}

/// Checks a put against the region the peer described, before anything reaches UCX.
status check_put(const void* local, uint64_t bytes, const remote_region& region, uint64_t address) {
  if (local == nullptr && bytes > 0) return {status_code::invalid_argument, "put from a null buffer"};
  if (region.packed_key.empty()) return {status_code::invalid_argument, "put into a region without a remote key"};
  if (address < region.address || bytes > region.bytes || address - region.address > region.bytes - bytes)
    return {status_code::invalid_argument, fmt::format("put of {} bytes at {:#x} outside the region [{:#x}, +{})",
                                                       bytes, address, region.address, region.bytes)};
  return status::ok();
}

// The planes whose callbacks this thread is running now (their progress() from there does nothing).
thread_local std::vector<const void*> dispatching;

}  // namespace

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

namespace {

void on_send_done(void* request, ucs_status_t st, void* user_data) {
  auto* o = static_cast<ucx_plane::impl::op*>(user_data);
  o->owner->finish(o, st);
  ucp_request_free(request);
}

void on_recv_done(void* request, ucs_status_t st, size_t length, void* user_data) {
  auto* in = static_cast<ucx_plane::impl::incoming*>(user_data);
  if (st == UCS_OK) {
    in->payload.resize(length);
    in->owner->deliver(in->from, in->ch, std::move(in->payload));
  }
  delete in;
  ucp_request_free(request);
}

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t st) {
  auto* p = static_cast<ucx_plane::impl::peer_state*>(arg);
  p->owner->fail_peer(*p, st);
}

ucs_status_t on_active_message(void* arg, const void* header, size_t header_bytes, void* data, size_t bytes,
                               const ucp_am_recv_param_t* param) {
  auto* c = static_cast<ucx_plane::impl::am_context*>(arg);
  return c->owner->receive(c->ch, header, header_bytes, data, bytes, param);
}

}  // namespace

// --- setup and teardown ---

status ucx_plane::impl::init() {
  ucp_config_t* config = nullptr;
  if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK)
    return from_ucs(st, "reading the UCX configuration");
  ucs_status_t st = UCS_OK;
  if (!options.tls.empty()) st = ucp_config_modify(config, "TLS", options.tls.c_str());
  if (st == UCS_OK && !options.net_devices.empty())
    st = ucp_config_modify(config, "NET_DEVICES", options.net_devices.c_str());
  if (st != UCS_OK) {
    ucp_config_release(config);
    return from_ucs(st, fmt::format("setting UCX_TLS={} UCX_NET_DEVICES={}", options.tls, options.net_devices));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // RMA for puts and flushes, AM for messages, WAKEUP for the progress thread's event fd.
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) return from_ucs(st, "ucp_init");

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // `mutex` serializes every call
  if (st = ucp_worker_create(context, &wparams, &worker); st != UCS_OK) return from_ucs(st, "ucp_worker_create");
  if (st = ucp_worker_get_efd(worker, &event_fd); st != UCS_OK) return from_ucs(st, "ucp_worker_get_efd");

  ucp_address_t* addr = nullptr;
  size_t addr_bytes = 0;
  if (st = ucp_worker_get_address(worker, &addr, &addr_bytes); st != UCS_OK)
    return from_ucs(st, "ucp_worker_get_address");
  const auto* first = reinterpret_cast<const uint8_t*>(addr);
  address.assign(first, first + addr_bytes);
  ucp_worker_release_address(worker, addr);

  ILLM_RETURN_IF_ERROR(install_am_handler(channel::attend));
  return install_am_handler(channel::partials);
}

status ucx_plane::impl::install_am_handler(channel ch) {
  am[uint8_t(ch)] = {this, ch};
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                     UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.id = uint8_t(ch);
  param.flags = UCP_AM_FLAG_WHOLE_MSG;  // eager messages arrive in one piece
  param.cb = on_active_message;
  param.arg = &am[uint8_t(ch)];
  if (ucs_status_t st = ucp_worker_set_am_recv_handler(worker, &param); st != UCS_OK)
    return from_ucs(st, fmt::format("installing the handler of channel {}", channel_name(ch)));
  return status::ok();
}

void ucx_plane::impl::shutdown() {
  if (progress_thread.joinable()) {
    stopping = true;
    ucp_worker_signal(worker);
    progress_thread.join();
  }
  std::vector<std::function<void()>> last;
  {
    std::lock_guard lock(mutex);
    if (worker) {
      for (auto& [id, p] : peers) close_endpoint(*p);
      // Force-closing completes at once in practice; the bound only guards against a UCX bug.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!closing.empty() && std::chrono::steady_clock::now() < deadline) {
        ucp_worker_progress(worker);
        reap_closing();
      }
      for (ucp_mem_h memh : regions) ucp_mem_unmap(context, memh);
      regions.clear();
      ucp_worker_destroy(worker);
      worker = nullptr;
    }
    if (context) ucp_cleanup(context);
    context = nullptr;
    last.swap(ready);
  }
  // Operations that were pending complete now, with the error UCX gave them (the plane is closed
  // for new ones).
  for (auto& f : last) f();
}

// --- endpoints ---

status ucx_plane::impl::usable_peer(peer_id peer, peer_state*& out) {
  if (!worker) return {status_code::io_error, "the UCX plane is closed"};
  auto it = peers.find(peer);
  if (it == peers.end()) return {status_code::invalid_argument, fmt::format("peer {} is not connected", peer)};
  if (it->second->failed) return it->second->failure;
  out = it->second.get();
  return status::ok();
}

void ucx_plane::impl::fail_peer(peer_state& p, ucs_status_t st) {
  if (p.failed) return;
  p.failed = true;
  p.failure = from_ucs(st, fmt::format("peer {} failed", p.id));
  to_close.push_back(&p);  // UCX wants the endpoint closed, but not from inside its own callback
  if (peer_error) ready.push_back([handler = peer_error, id = p.id, why = p.failure] { handler(id, why); });
}

void ucx_plane::impl::close_endpoint(peer_state& p) {
  if (!p.ep) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // fails what is pending now instead of waiting for a peer
  ucs_status_ptr_t request = ucp_ep_close_nbx(p.ep, &param);
  if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
  p.ep = nullptr;
  // Operations on the endpoint were purged by the close: no one uses these keys any more.
  for (auto& [key, rkey] : p.rkeys) ucp_rkey_destroy(rkey);
  p.rkeys.clear();
}

void ucx_plane::impl::close_failed() {
  for (peer_state* p : to_close) close_endpoint(*p);
  to_close.clear();
  reap_closing();
}

void ucx_plane::impl::reap_closing() {
  std::erase_if(closing, [](void* request) {
    if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
    ucp_request_free(request);
    return true;
  });
}

status ucx_plane::impl::rkey_for(peer_state& p, const std::vector<uint8_t>& packed, ucp_rkey_h& out) {
  std::string key(packed.begin(), packed.end());
  if (auto it = p.rkeys.find(key); it != p.rkeys.end()) {
    out = it->second;
    return status::ok();
  }
  if (ucs_status_t st = ucp_ep_rkey_unpack(p.ep, packed.data(), &out); st != UCS_OK)
    return from_ucs(st, fmt::format("unpacking a remote key of peer {}", p.id));
  p.rkeys.emplace(std::move(key), out);
  return status::ok();
}

// --- operations ---

ucp_request_param_t ucx_plane::impl::param_for(op* o) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send_done;
  param.user_data = o;
  ++in_flight;
  return param;
}

void ucx_plane::impl::issued(op* o, ucs_status_ptr_t request) {
  if (request == nullptr) return finish(o, UCS_OK);  // completed at once: no callback will come
  if (UCS_PTR_IS_ERR(request)) return finish(o, UCS_PTR_STATUS(request));
  // Pending: on_send_done finishes it from a later progress call.
}

void ucx_plane::impl::finish(op* o, ucs_status_t st) {
  --in_flight;
  status result = status::ok();
  if (st == UCS_OK) {
    if (o->what == kind::put) sent.put_bytes += o->bytes;
    if (o->what == kind::send) {
      sent.message_bytes[uint8_t(o->ch)] += o->bytes;
      ++sent.messages;
    }
  } else {
    static constexpr const char* names[] = {"put", "flush", "send"};
    auto it = peers.find(o->peer);
    const bool peer_failed = it != peers.end() && it->second->failed;
    result = from_ucs(st, fmt::format("{} to peer {}{}", names[int(o->what)], o->peer, peer_failed ? " (failed)" : ""));
  }
  if (o->done) ready.push_back([done = std::move(o->done), result] { done(result); });
  delete o;
}

// --- receiving ---

ucs_status_t ucx_plane::impl::receive(channel ch, const void* header, size_t header_bytes, void* data, size_t bytes,
                                      const ucp_am_recv_param_t* param) {
  peer_id from = 0;
  if (header_bytes != sizeof from) return UCS_OK;  // not one of ours: dropped
  std::memcpy(&from, header, sizeof from);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    const auto* first = static_cast<const uint8_t*>(data);
    deliver(from, ch, std::vector<uint8_t>(first, first + bytes));
    return UCS_OK;
  }
  // Rendezvous: only the announcement is here; fetch the data into a buffer of its size.
  if (bytes > options.max_message_bytes) return UCS_ERR_EXCEEDS_LIMIT;  // the sender's send fails
  ++rendezvous;
  auto* in = new incoming{this, from, ch, std::vector<uint8_t>(bytes)};
  ucp_request_param_t rparam{};
  rparam.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rparam.cb.recv_am = on_recv_done;
  rparam.user_data = in;
  ucs_status_ptr_t request = ucp_am_recv_data_nbx(worker, data, in->payload.data(), bytes, &rparam);
  if (request == nullptr) deliver(from, ch, std::move(in->payload));
  if (!UCS_PTR_IS_PTR(request)) delete in;  // done at once, or failed (the sender sees the error)
  return UCS_OK;
}

void ucx_plane::impl::deliver(peer_id from, channel ch, std::vector<uint8_t> payload) {
  const message_handler& handler = handlers[uint8_t(ch)];
  if (!handler) return;  // nobody listens on this channel yet: dropped
  ready.push_back([handler, from, bytes = std::move(payload)]() mutable { handler(from, std::move(bytes)); });
}

// --- progress ---

unsigned ucx_plane::impl::progress() {
  if (std::find(dispatching.begin(), dispatching.end(), this) != dispatching.end()) return 0;
  std::lock_guard order(dispatch);
  std::vector<std::function<void()>> now;
  unsigned events = 0;
  {
    std::lock_guard lock(mutex);
    if (!worker) return 0;
    // Bounded, so that callbacks run between bursts of traffic.
    for (int round = 0; round < 1024; ++round) {
      const unsigned n = ucp_worker_progress(worker);
      if (n == 0) break;
      events += n;
    }
    close_failed();
    now.swap(ready);
  }
  dispatching.push_back(this);
  for (auto& f : now) f();
  dispatching.pop_back();
  return events + unsigned(now.size());
}

void ucx_plane::impl::progress_loop() {
  while (!stopping) {
    if (progress() > 0) continue;
    ucs_status_t armed;
    {
      std::lock_guard lock(mutex);
      armed = ready.empty() ? ucp_worker_arm(worker) : UCS_ERR_BUSY;
    }
    if (armed == UCS_ERR_BUSY) continue;
    // Armed (or arming failed: then the timeout alone paces the loop). ucp_worker_signal from another
    // thread, or any worker event, ends the wait early; the timeout keeps UCX's keepalive running.
    pollfd fd{event_fd, POLLIN, 0};
    ::poll(&fd, 1, options.poll_timeout_ms);
  }
}

// --- ucx_plane ---

ucx_plane::ucx_plane(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

ucx_plane::~ucx_plane() {
  impl_->shutdown();
}

result<std::unique_ptr<ucx_plane>> ucx_plane::create(peer_id self, const ucx_options& options) {
  auto state = std::make_unique<impl>(self, options);
  if (status s = state->init(); !s.is_ok()) {
    state->shutdown();
    return s;
  }
  return std::unique_ptr<ucx_plane>(new ucx_plane(std::move(state)));
}

peer_id ucx_plane::self() const {
  return impl_->self_id;
}

std::vector<uint8_t> ucx_plane::worker_address() const {
  return impl_->address;
}

status ucx_plane::connect(peer_id peer, std::span<const uint8_t> address) {
  if (address.empty()) return {status_code::invalid_argument, fmt::format("empty worker address for peer {}", peer)};
  impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (!s.worker) return {status_code::io_error, "the UCX plane is closed"};
  auto it = s.peers.find(peer);
  if (it != s.peers.end() && !it->second->failed)
    return {status_code::invalid_argument, fmt::format("peer {} is already connected", peer)};
  auto p = std::make_unique<impl::peer_state>(impl::peer_state{&s, peer, nullptr, false, status::ok(), {}});
  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = on_endpoint_error;
  params.err_handler.arg = p.get();
  if (ucs_status_t st = ucp_ep_create(s.worker, &params, &p->ep); st != UCS_OK)
    return from_ucs(st, fmt::format("connecting to peer {}", peer));
  if (it != s.peers.end()) {
    s.retired.push_back(std::move(it->second));  // the failed one: its handler argument stays valid
    it->second = std::move(p);
  } else {
    s.peers.emplace(peer, std::move(p));
  }
  return status::ok();
}

status ucx_plane::disconnect(peer_id peer) {
  impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  auto it = s.peers.find(peer);
  if (it == s.peers.end()) return {status_code::invalid_argument, fmt::format("peer {} is not connected", peer)};
  impl::peer_state& p = *it->second;
  s.close_endpoint(p);
  p.failed = true;
  p.failure = {status_code::io_error, fmt::format("peer {} was disconnected", peer)};
  s.retired.push_back(std::move(it->second));
  s.peers.erase(it);
  return status::ok();
}

void ucx_plane::on_peer_error(peer_error_handler handler) {
  std::lock_guard lock(impl_->mutex);
  impl_->peer_error = std::move(handler);
}

unsigned ucx_plane::progress() {
  return impl_->progress();
}

status ucx_plane::start_progress_thread() {
  impl& s = *impl_;
  if (s.running.exchange(true)) return status::ok();
  try {
    s.progress_thread = std::thread([&s] { s.progress_loop(); });
  } catch (const std::system_error& e) {
    s.running = false;
    return {status_code::internal, fmt::format("starting the UCX progress thread: {}", e.what())};
  }
  return status::ok();
}

uint64_t ucx_plane::rendezvous_received() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->rendezvous;
}

result<remote_region> ucx_plane::register_memory(void* base, uint64_t bytes) {
  if (base == nullptr || bytes == 0) return status{status_code::invalid_argument, "registering an empty region"};
  impl& s = *impl_;
  std::lock_guard lock(s.mutex);
  if (!s.worker) return status{status_code::io_error, "the UCX plane is closed"};
  // Host memory. A GPU pool would need a CUDA-enabled UCX (memory_type UCS_MEMORY_TYPE_CUDA here);
  // with Debian's build, its blocks are staged through a pinned host buffer registered here instead.
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = base;
  params.length = bytes;
  ucp_mem_h memh = nullptr;
  if (ucs_status_t st = ucp_mem_map(s.context, &params, &memh); st != UCS_OK)
    return from_ucs(st, fmt::format("registering {} bytes", bytes));
  void* key = nullptr;
  size_t key_bytes = 0;
  if (ucs_status_t st = ucp_rkey_pack(s.context, memh, &key, &key_bytes); st != UCS_OK) {
    ucp_mem_unmap(s.context, memh);
    return from_ucs(st, "packing a remote key");
  }
  const auto* first = static_cast<const uint8_t*>(key);
  remote_region region{reinterpret_cast<uint64_t>(base), bytes, std::vector<uint8_t>(first, first + key_bytes)};
  ucp_rkey_buffer_release(key);
  s.regions.push_back(memh);
  return region;
}

namespace {

/// Runs `done` with `s` when it is not ok; tells whether it did.
bool refused(const status& s, completion& done) {
  if (s.is_ok()) return false;
  if (done) done(s);
  return true;
}

status too_many(uint32_t limit) {
  return {status_code::out_of_memory, fmt::format("{} operations in flight already (the limit)", limit)};
}

}  // namespace

void ucx_plane::put(peer_id peer, const void* local, uint64_t bytes, const remote_region& region,
                    uint64_t remote_address, completion done) {
  if (refused(check_put(local, bytes, region, remote_address), done)) return;
  // A GPU source would first be copied (cudaMemcpyAsync) into pinned host memory and put from there.
  impl& s = *impl_;
  status verdict = status::ok();
  {
    std::lock_guard lock(s.mutex);
    impl::peer_state* p = nullptr;
    ucp_rkey_h rkey = nullptr;
    verdict = s.usable_peer(peer, p);
    if (verdict.is_ok() && s.in_flight >= s.options.max_in_flight) verdict = too_many(s.options.max_in_flight);
    if (verdict.is_ok()) verdict = s.rkey_for(*p, region.packed_key, rkey);
    if (verdict.is_ok()) {
      auto* o = new impl::op{&s, impl::kind::put, peer, bytes, channel::attend, std::move(done), 0, {}};
      ucp_request_param_t param = s.param_for(o);
      s.issued(o, ucp_put_nbx(p->ep, local, bytes, remote_address, rkey, &param));
    }
  }
  if (!refused(verdict, done)) s.wake();
}

void ucx_plane::flush(peer_id peer, completion done) {
  impl& s = *impl_;
  status verdict = status::ok();
  {
    std::lock_guard lock(s.mutex);
    impl::peer_state* p = nullptr;
    verdict = s.usable_peer(peer, p);
    if (verdict.is_ok() && s.in_flight >= s.options.max_in_flight) verdict = too_many(s.options.max_in_flight);
    if (verdict.is_ok()) {
      auto* o = new impl::op{&s, impl::kind::flush, peer, 0, channel::attend, std::move(done), 0, {}};
      ucp_request_param_t param = s.param_for(o);
      s.issued(o, ucp_ep_flush_nbx(p->ep, &param));
    }
  }
  if (!refused(verdict, done)) s.wake();
}

void ucx_plane::send(peer_id peer, channel ch, std::span<const uint8_t> payload, completion done) {
  impl& s = *impl_;
  if (!valid_channel(ch)) return void(refused({status_code::invalid_argument, "no such channel"}, done));
  if (payload.size() > s.options.max_message_bytes)
    return void(refused({status_code::invalid_argument, fmt::format("a message of {} bytes (the limit is {})",
                                                                    payload.size(), s.options.max_message_bytes)},
                        done));
  status verdict = status::ok();
  {
    std::lock_guard lock(s.mutex);
    impl::peer_state* p = nullptr;
    verdict = s.usable_peer(peer, p);
    if (verdict.is_ok() && s.in_flight >= s.options.max_in_flight) verdict = too_many(s.options.max_in_flight);
    if (verdict.is_ok()) {
      auto* o = new impl::op{&s, impl::kind::send, peer,      payload.size(),
                             ch, std::move(done),  s.self_id, std::vector<uint8_t>(payload.begin(), payload.end())};
      ucp_request_param_t param = s.param_for(o);
      s.issued(o, ucp_am_send_nbx(p->ep, unsigned(ch), &o->header, sizeof o->header, o->payload.data(),
                                  o->payload.size(), &param));
    }
  }
  if (!refused(verdict, done)) s.wake();
}

void ucx_plane::on_message(channel ch, message_handler handler) {
  if (!valid_channel(ch)) return;
  std::lock_guard lock(impl_->mutex);
  impl_->handlers[uint8_t(ch)] = std::move(handler);
}

traffic ucx_plane::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->sent;
}

}  // namespace illm::transport
