#include "actors/settings/settings.hpp"

namespace illm::actors {

const std::vector<int_setting<batch_settings>>& batch_settings_table() {
  static const std::vector<int_setting<batch_settings>> table{
      {"max_batch_tokens", &batch_settings::max_batch_tokens, 1, 1 << 16, "tokens per engine step (a prefill chunk's)"},
      {"max_batch_seqs", &batch_settings::max_batch_seqs, 1, 4096, "sequences per engine step"},
      {"mixed_step_tokens", &batch_settings::mixed_step_tokens, 0, 1 << 16,
       "a step with decode tokens prefills up to this many tokens in all, spreading prompts over the decode steps "
       "(0: up to max_batch_tokens)"},
      {"overlap_min_tokens", &batch_settings::overlap_min_tokens, 0, 1 << 20,
       "steps of this many tokens with remote blocks run as two lanes, dense beside remote attention (0: never)"},
      {"room_prefill_min_chunks", &batch_settings::room_prefill_min_chunks, 0, 1 << 20,
       "a request with a room has its prompt prefilled by the room's holders when this many chunks go out "
       "(0: never; its blocks move into the room)"},
  };
  return table;
}

}  // namespace illm::actors
