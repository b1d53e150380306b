#include "actors/messages.hpp"

namespace illm::actors {

void quiet_idle_scheduler(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", size_t{10});  // 10 x 50 us instead of 500, then sleep
}

namespace {

/// The name a message type is registered under: ILLM_INSPECT's, and std::vector<...> around it for a vector.
template <class T>
std::string registered_name(const T* type) {
  return message_name(type);
}
template <class T>
std::string registered_name(const std::vector<T>*) {
  return "std::vector<" + registered_name(static_cast<const T*>(nullptr)) + ">";
}

template <class... Ts>
void register_types(caf::actor_system_config& cfg, message_types<Ts...>) {
  (cfg.add_message_type<Ts>(registered_name(static_cast<const Ts*>(nullptr))), ...);
}

}  // namespace

void register_messages(caf::actor_system_config& cfg) {
  register_types(cfg, peer_messages{});
  register_types(cfg, other_messages{});
}

gpu::sampling_params sampling_of(const generate_params& p) {
  gpu::sampling_params s;
  s.temperature = p.temperature;
  s.top_p = p.top_p;
  s.top_k = p.top_k;
  s.min_p = p.min_p;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.repetition_penalty = p.repetition_penalty;
  for (const token_bias& b : p.logit_bias) s.logit_bias.emplace_back(b.token, b.bias);
  s.min_tokens = p.min_tokens;
  s.logprobs = p.logprobs;
  return s;
}

void set_sampling(generate_params& p, const gpu::sampling_params& s) {
  p.temperature = s.temperature;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.min_p = s.min_p;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.repetition_penalty = s.repetition_penalty;
  p.logit_bias.clear();
  for (const auto& [token, bias] : s.logit_bias) p.logit_bias.push_back({token, bias});
  p.min_tokens = s.min_tokens;
  p.logprobs = s.logprobs;
}

}  // namespace illm::actors
