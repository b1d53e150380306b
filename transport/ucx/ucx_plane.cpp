// ucx_plane's data_plane calls: connect, register, put, flush, send; the UCX side is in ucx_worker.cpp.
#include "transport/ucx/ucx_impl.hpp"

namespace illm::transport {

using namespace ucx_detail;

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

template <class Issue>
void ucx_plane::impl::submit(peer_id peer, completion& done, Issue issue) {
  status verdict = status::ok();
  {
    std::lock_guard lock(mutex);
    peer_state* p = nullptr;
    verdict = usable_peer(peer, p);
    if (verdict.is_ok() && in_flight >= options.max_in_flight) verdict = too_many(options.max_in_flight);
    if (verdict.is_ok()) verdict = issue(*p);
  }
  if (!refused(verdict, done)) wake();
}

void ucx_plane::put(peer_id peer, const void* local, uint64_t bytes, const remote_region& region,
                    uint64_t remote_address, completion done) {
  if (refused(check_put(local, bytes, region, remote_address), done)) return;
  // A GPU source would first be copied (cudaMemcpyAsync) into pinned host memory and put from there.
  impl& s = *impl_;
  s.submit(peer, done, [&](impl::peer_state& p) {
    ucp_rkey_h rkey = nullptr;
    if (status bad = s.rkey_for(p, region.packed_key, rkey); !bad.is_ok()) return bad;
    auto* o = new impl::op{&s, impl::kind::put, peer, bytes, channel::attend, std::move(done), 0, {}};
    ucp_request_param_t param = s.param_for(o);
    s.issued(o, ucp_put_nbx(p.ep, local, bytes, remote_address, rkey, &param));
    return status::ok();
  });
}

void ucx_plane::flush(peer_id peer, completion done) {
  impl& s = *impl_;
  s.submit(peer, done, [&](impl::peer_state& p) {
    auto* o = new impl::op{&s, impl::kind::flush, peer, 0, channel::attend, std::move(done), 0, {}};
    ucp_request_param_t param = s.param_for(o);
    s.issued(o, ucp_ep_flush_nbx(p.ep, &param));
    return status::ok();
  });
}

void ucx_plane::send(peer_id peer, channel ch, std::span<const uint8_t> payload, completion done) {
  impl& s = *impl_;
  if (!valid_channel(ch)) return void(refused({status_code::invalid_argument, "no such channel"}, done));
  if (payload.size() > s.options.max_message_bytes)
    return void(refused({status_code::invalid_argument, fmt::format("a message of {} bytes (the limit is {})",
                                                                    payload.size(), s.options.max_message_bytes)},
                        done));
  s.submit(peer, done, [&](impl::peer_state& p) {
    auto* o = new impl::op{&s, impl::kind::send, peer,      payload.size(),
                           ch, std::move(done),  s.self_id, std::vector<uint8_t>(payload.begin(), payload.end())};
    ucp_request_param_t param = s.param_for(o);
    s.issued(o, ucp_am_send_nbx(p.ep, unsigned(ch), &o->header, sizeof o->header, o->payload.data(),
                                o->payload.size(), &param));
    return status::ok();
  });
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
