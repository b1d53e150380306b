// The UCX worker behind ucx_plane: context and worker set up and torn down, endpoints to peers and their
// failures, operations issued and completed, active messages received, and progress.
#include "transport/ucx/ucx_impl.hpp"

namespace illm::transport {

using namespace ucx_detail;


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

  if (auto attend = install_am_handler(channel::attend); !attend.is_ok()) return attend;
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

}  // namespace illm::transport
