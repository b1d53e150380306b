#include "actors/messages.hpp"

namespace illm::actors {

void quiet_idle_scheduler(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", size_t{10});  // 10 x 50 us instead of 500, then sleep
}

void register_messages(caf::actor_system_config& cfg) {
  cfg.add_message_type<request_placement_entry>("request_placement_entry")
      .add_message_type<std::vector<request_placement_entry>>("std::vector<request_placement_entry>")
      .add_message_type<instance_stats>("instance_stats")
      .add_message_type<heartbeat>("heartbeat")
      .add_message_type<move_kvcache>("move_kvcache")
      .add_message_type<try_move_kvcache>("try_move_kvcache")
      .add_message_type<move_reservation>("move_reservation")
      .add_message_type<commit_move>("commit_move")
      .add_message_type<commit_result>("commit_result")
      .add_message_type<abort_move>("abort_move")
      .add_message_type<release_blocks>("release_blocks")
      .add_message_type<move_report>("move_report")
      .add_message_type<std::vector<move_report>>("std::vector<move_report>")
      .add_message_type<instance_view>("instance_view")
      .add_message_type<cluster_view>("cluster_view")
      .add_message_type<cluster_status>("cluster_status")
      .add_message_type<join_cluster>("join_cluster")
      .add_message_type<drain_instance>("drain_instance")
      .add_message_type<leave_cluster>("leave_cluster")
      .add_message_type<expel_member>("expel_member")
      .add_message_type<use_gmanager>("use_gmanager")
      .add_message_type<control_endpoint>("control_endpoint")
      .add_message_type<attend>("attend")
      .add_message_type<partials>("partials")
      .add_message_type<transfer_done>("transfer_done")
      .add_message_type<peer_failed>("peer_failed")
      .add_message_type<incoming_attend>("incoming_attend")
      .add_message_type<incoming_partials>("incoming_partials")
      .add_message_type<reserve_room>("reserve_room")
      .add_message_type<room_answer>("room_answer")
      .add_message_type<release_room>("release_room")
      .add_message_type<keep_blocks>("keep_blocks")
      .add_message_type<need_blocks>("need_blocks")
      .add_message_type<loan_result>("loan_result")
      .add_message_type<pick_blocks>("pick_blocks")
      .add_message_type<block_pick>("block_pick")
      .add_message_type<blocks_moved>("blocks_moved")
      .add_message_type<move_abandoned>("move_abandoned")
      .add_message_type<request_released>("request_released")
      .add_message_type<placement_update>("placement_update")
      .add_message_type<generate_request>("generate_request")
      .add_message_type<token_event>("token_event")
      .add_message_type<request_finished>("request_finished")
      .add_message_type<cancel_request>("cancel_request")
      .add_message_type<reserve_chunk>("reserve_chunk")
      .add_message_type<prefill_chunk>("prefill_chunk")
      .add_message_type<chunk_started>("chunk_started")
      .add_message_type<chunk_done>("chunk_done")
      .add_message_type<commit_chunk>("commit_chunk")
      .add_message_type<abort_chunk>("abort_chunk")
      .add_message_type<take_reservation>("take_reservation")
      .add_message_type<return_reservation>("return_reservation")
      .add_message_type<cancel_chunk>("cancel_chunk")
      .add_message_type<pick_replicas>("pick_replicas")
      .add_message_type<replicate_blocks>("replicate_blocks")
      .add_message_type<replica_result>("replica_result")
      .add_message_type<blocks_replicated>("blocks_replicated")
      .add_message_type<replicas_lost>("replicas_lost")
      .add_message_type<spare_reclaimed>("spare_reclaimed")
      .add_message_type<promote_replicas>("promote_replicas")
      .add_message_type<replicas_promoted>("replicas_promoted")
      .add_message_type<take_over>("take_over")
      .add_message_type<taken_over>("taken_over")
      .add_message_type<report_orphan>("report_orphan")
      .add_message_type<orphan_report>("orphan_report")
      .add_message_type<adopt_orphan>("adopt_orphan")
      .add_message_type<orphan_adopted>("orphan_adopted")
      .add_message_type<gpu::block_key>("block_key")
      .add_message_type<gpu::prefix_changes>("prefix_changes")
      .add_message_type<placement::prefix_segment>("prefix_segment")
      .add_message_type<prefix_lookup>("prefix_lookup")
      .add_message_type<prefix_holders>("prefix_holders")
      .add_message_type<find_prefix>("find_prefix")
      .add_message_type<read_prefix>("read_prefix")
      .add_message_type<copy_prefix>("copy_prefix")
      .add_message_type<prefix_read>("prefix_read");
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
