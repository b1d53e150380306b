#include "transport/faulty/faulty_plane.hpp"

#include <algorithm>

namespace illm::transport {

namespace {

status injected_failure(const char* what) {
  return {status_code::io_error, std::string("injected fault: ") + what};
}

}  // namespace

faulty_plane::faulty_plane(std::shared_ptr<data_plane> inner, fault_spec spec)
    : inner_(std::move(inner)), spec_(std::move(spec)), random_(spec_.seed) {
  delay_thread_ = std::thread([this] { run_delayed(); });
}

faulty_plane::~faulty_plane() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  delayed_changed_.notify_all();
  delay_thread_.join();
}

fault_counts faulty_plane::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}

faulty_plane::fate faulty_plane::draw(const char* kind, double fail, double drop, double duplicate, double delay) {
  std::lock_guard lock(mutex_);
  const double x = std::uniform_real_distribution<double>(0.0, 1.0)(random_);
  const std::pair<double, fate> bands[] = {
      {fail, fate::fail}, {drop, fate::drop}, {duplicate, fate::duplicate}, {delay, fate::delay}};
  static const char* names[] = {"pass", "fail", "drop", "duplicate", "delay"};
  double below = 0;
  for (const auto& [chance, f] : bands) {
    below += chance;
    if (x < below) {
      ++injected_[std::string(kind) + "_" + names[int(f)]];
      return f;
    }
  }
  return fate::pass;
}

bool faulty_plane::cut_off(peer_id peer) {
  const bool in_spec = std::find(spec_.partitioned.begin(), spec_.partitioned.end(), peer) != spec_.partitioned.end();
  std::lock_guard lock(mutex_);
  auto until = cut_until_.find(peer);
  if (!in_spec && (until == cut_until_.end() || std::chrono::steady_clock::now() >= until->second)) return false;
  ++injected_["partition"];
  return true;
}

void faulty_plane::partition_for(const std::vector<peer_id>& peers, std::chrono::milliseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  std::lock_guard lock(mutex_);
  for (peer_id p : peers) cut_until_[p] = until;
}

void faulty_plane::later(std::function<void()> action) {
  {
    std::lock_guard lock(mutex_);
    delayed_.emplace(std::chrono::steady_clock::now() + spec_.delay, std::move(action));
  }
  delayed_changed_.notify_all();
}

void faulty_plane::run_delayed() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (delayed_.empty()) {
      if (stopping_) return;
      delayed_changed_.wait(lock);
      continue;
    }
    const auto due = delayed_.begin()->first;
    if (!stopping_ && std::chrono::steady_clock::now() < due) {
      delayed_changed_.wait_until(lock, due);
      continue;
    }
    auto action = std::move(delayed_.begin()->second);
    delayed_.erase(delayed_.begin());
    lock.unlock();
    action();  // at its time, or at once when the plane stops
    lock.lock();
  }
}

result<remote_region> faulty_plane::register_memory(void* base, uint64_t bytes) {
  return inner_->register_memory(base, bytes);
}

void faulty_plane::put(peer_id peer, const void* local, uint64_t bytes, const remote_region& region,
                       uint64_t remote_address, completion done) {
  if (cut_off(peer)) return done(injected_failure("the peer is partitioned"));
  switch (draw("put", spec_.put_fail, spec_.put_drop, 0, spec_.put_delay)) {
    case fate::fail: return done(injected_failure("put failed"));
    case fate::drop: return done(status::ok());  // nothing written: the commit's checksum must catch it
    case fate::delay:
      return later([inner = inner_, peer, local, bytes, region, remote_address, done = std::move(done)]() mutable {
        inner->put(peer, local, bytes, region, remote_address, std::move(done));
      });
    default: return inner_->put(peer, local, bytes, region, remote_address, std::move(done));
  }
}

void faulty_plane::flush(peer_id peer, completion done) {
  if (cut_off(peer)) return done(injected_failure("the peer is partitioned"));
  inner_->flush(peer, std::move(done));
}

void faulty_plane::send(peer_id peer, channel ch, std::span<const uint8_t> payload, completion done) {
  if (cut_off(peer)) return done(injected_failure("the peer is partitioned"));
  switch (draw("send", spec_.send_fail, spec_.send_drop, spec_.send_duplicate, spec_.send_delay)) {
    case fate::fail: return done(injected_failure("message not sent"));
    case fate::drop: return done(status::ok());
    case fate::duplicate:
      inner_->send(peer, ch, payload, [](status) {});
      return inner_->send(peer, ch, payload, std::move(done));
    case fate::delay:
      return later([inner = inner_, peer, ch, copy = std::vector<uint8_t>(payload.begin(), payload.end()),
                    done = std::move(done)]() mutable { inner->send(peer, ch, copy, std::move(done)); });
    default: return inner_->send(peer, ch, payload, std::move(done));
  }
}

void faulty_plane::on_message(channel ch, message_handler handler) {
  if (!handler) return inner_->on_message(ch, nullptr);  // removed: the inner plane refuses the channel's messages
  inner_->on_message(ch, [this, handler = std::move(handler)](peer_id from, std::vector<uint8_t> payload) {
    if (cut_off(from)) return;  // a partitioned peer's messages never arrive
    handler(from, std::move(payload));
  });
}

}  // namespace illm::transport
