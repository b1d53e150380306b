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
      .add_message_type<join_cluster>("join_cluster")
      .add_message_type<drain_instance>("drain_instance")
      .add_message_type<leave_cluster>("leave_cluster")
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
      .add_message_type<cancel_chunk>("cancel_chunk");
}

}  // namespace illm::actors
