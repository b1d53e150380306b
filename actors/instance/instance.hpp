#pragma once
// An instance: one model replica with its own KV pool and batch. It admits requests against the
// cluster's free blocks (its rManager's latest view), runs continuous batching (its worker executes
// each step), streams tokens to the request actors, and keeps every request's block table. When its
// pool is full, a sequence waits while the rManager borrows room elsewhere (moving full blocks out);
// only when no instance has a free block is a sequence preempted and recomputed later. A long request's
// prompt may be prefilled by its room's holders (room prefill), and this instance computes chunks of
// others' prompts into blocks reserved for them.

#include <memory>

#include "actors/checker_hooks.hpp"
#include "actors/messages.hpp"
#include "actors/logic/pool_promises.hpp"
#include "actors/logic/room_prefill.hpp"
#include "actors/settings/settings.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "gpu/engine.hpp"
#include "gpu/grammar/forward.hpp"
#include "gpu/prefix_cache.hpp"

namespace illm::actors {

/// What an instance needs.
struct instance_config {
  instance_id id = 0;
  std::shared_ptr<gpu::kv_pool> pool;
  caf::actor worker;
  rmanager_actor rmanager;
  /// How it batches its steps (max_batch_tokens at most the worker's engine limits). Room prefill
  /// (actors/logic/room_prefill.hpp): a request with a room has its prompt prefilled by the room's holders, in chunks of
  /// a step's tokens less one per sequence a step holds (at least half a step), when their part is at least
  /// room_prefill_min_chunks chunks.
  batch_settings batch;
  uint32_t max_waiting = 1024;   ///< queued requests beyond this are refused
  uint32_t min_loan_blocks = 8;  ///< a loan asks for at least this many blocks
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional
  bool stream_tokens = true;  ///< false (the simulator): only the first token and the end are sent
  bool lending = true;        ///< false (static-multi): admit against the local pool, never borrow
  /// What its pool is promised to (shared with its rManager): the instance sets its running requests'
  /// share and reads the rooms'. None: nothing is promised to rooms, and the rManager hears the running
  /// requests' share with their placement.
  std::shared_ptr<pool_promises> promises;
  delivery_tap tap;                                ///< told every token and end it sends (empty: nobody)
  planted_defect plant = planted_defect::none;  ///< a defect it puts in what it delivers (tests of the books)
  /// The grammars of structured outputs over the model's vocabulary (none: a request with one fails).
  std::shared_ptr<gpu::grammar::constraint_cache> constraints;
  /// The prefix cache of its pool (none: no prefix caching), and the root of its keys (the model, its weight and
  /// KV types).
  std::shared_ptr<gpu::prefix_cache> prefix_cache;
  gpu::block_key prefix_root;
  /// --prefix-cache cluster: a new request also reads the longest prefix that another member's cache holds, where
  /// it lies (actors/messages/prefix_cache.hpp).
  bool shared_prefixes = false;
};

/// Spawns an instance (on the scheduler: its handlers never block).
instance_actor spawn_instance(caf::actor_system& sys, instance_config config);

}  // namespace illm::actors
