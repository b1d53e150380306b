#pragma once
// A request actor: one per client request. It holds the prompt and every generated token (so the
// request can always be rebuilt), hands the request to an instance, streams its tokens to the client
// and ends it exactly once, on completion, error or cancellation.

#include <functional>

#include "actors/checker_hooks.hpp"
#include "actors/messages.hpp"

namespace illm::actors {

/// How a request actor reaches its client (called on the actor's thread, in order).
struct request_callbacks {
  std::function<void(int32_t token)> on_token;
  std::function<void(const request_finished& end)> on_finished;
  /// The books' tap (tests and `illm chaos`): told where the request is served from which token on, and the
  /// ends the request actor decides itself (the instances' tap tells what they send). Empty: nobody.
  delivery_tap on_delivery;
  /// When set, receives each token with its log probabilities instead of on_token.
  std::function<void(const token_event& token)> on_token_event;
};

/// Where a request runs: an instance's actor and its id in the cluster's views.
struct serving_instance {
  instance_actor actor;
  instance_id id = 0;
};

/// Spawns a request actor that submits `request` to `instance` (request.client is set to itself).
/// Send it cancel_request to stop the request, and the cluster_view when a member left: a request whose
/// instance is no member of the view ends with an error or, with `resume_elsewhere`, goes on on the
/// view's instance with the most free blocks from its prompt and the tokens so far (then its instance's
/// down message only starts a wait for that view).
caf::actor spawn_request(caf::actor_system& sys, generate_request request, serving_instance instance,
                         request_callbacks callbacks, bool resume_elsewhere = false);

}  // namespace illm::actors
