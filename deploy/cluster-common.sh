# shellcheck shell=bash disable=SC2015,SC2034,SC2317
# Shared by deploy/cluster.sh and deploy/cluster-netns.sh (sourced, not run): their options, starting the
# processes of a cluster (one `illm gmanager`, N `illm instance --join`, one `illm serve --gmanager`),
# waiting until it is up, watching it or running a command on it, and stopping everything it started in
# order: the command, the front end, the instances (SIGTERM: they drain and leave), the gManager; each
# group gets SIGKILL once its bound has passed. Every process runs in its own session (setsid), so a
# Ctrl-C on the terminal reaches this script only, which then stops them in that order.
#
# The sourcing script sets CC_NAME (its name in messages) and CC_NETNS (1: the namespace options exist),
# then defines the hooks and calls cc_main "$@":
#   node_wrap ROLE   sets WRAP, the command prefix that runs a process of ROLE (gm, i0.., fe) on its host
#   node_addr ROLE   prints the address ROLE's process listens on (or connects from)
#   node_where ROLE  prints where ROLE runs, for the summary
#   node_ucx_device ROLE  prints the network device of ROLE's UCX data plane
#   net_check        checks what the network needs (before anything is started)
#   net_up, net_down create / delete the network (net_down is called on every exit)
#   net_summary      prints extra summary lines and exports extra variables for the command

cc_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Options (see cc_usage).
opt_instances=4
opt_kv_blocks=256
opt_port=8000
opt_gm_port=0
opt_illm="$cc_repo/build/illm"
opt_model=""
opt_log_dir=""
opt_threads=""
opt_profile=""
opt_timeout=180
opt_setup=0
opt_frontend=1
opt_tls=1
opt_prefix=illm
opt_subnet=10.77.0
opt_run=()
opt_gm_args=()
opt_instance_args=()
opt_serve_args=()

# Started processes, by role: pid, log file, exit status once reaped.
declare -A cc_pid=() cc_log=() cc_status=() cc_reported=()
cc_roles=()
cc_cmd_pid=""
cc_dead=""
cc_signal=""
cc_hurry=0
cc_failed=0
cc_log_dir_made=0
cc_gmanager=""
cc_url=""
cc_t0=$SECONDS

cc_say() { echo "$CC_NAME: $*" >&2; }

cc_die() {
  cc_say "error: $*"
  exit 2
}

cc_usage() {
  cat <<EOF
Usage: deploy/$CC_NAME.sh [OPTIONS] [--run 'SHELL COMMAND' | -- COMMAND [ARGS...]]

Starts a cluster of illm processes: one gManager, N instances (UCX over tcp), one front end
(illm serve --gmanager: the OpenAI-compatible API). Waits until every instance has joined, every data
plane is connected and the front end's /health is 200, prints the addresses, then either serves until
SIGINT/SIGTERM or a process dies, or runs the command and stops (exit status: the command's). On every
exit it stops everything it started: front end, instances (SIGTERM: they drain), gManager.

It builds and installs nothing: run deploy/install-deps.sh, deploy/fetch-model.sh and the cmake build
(cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j) first, or give --setup.

Options:
  --instances N                instances, ids 0..N-1 (default 4)
  --kv-blocks-per-instance B   KV blocks of 16 tokens per instance (default 256)
  --port P                     the front end's port (default 8000; 0: any free one)
  --gmanager-port P            the gManager's port (default 0: any free one, read from its log)
  --illm PATH                  the illm binary (default build/illm)
  --model M                    model name or path, for the instances and the front end (default: illm's)
  --threads T                  engine threads per instance (default: cores / instances, at least 1)
  --profile FILE               the instances' profile (illm profile --out) for the gManager's greedy
                               placement (default: measured at start with illm profile, a few seconds)
  --log-dir DIR                each process's log in DIR (default: a temporary folder, removed on a
                               clean exit, kept and named when something failed)
  --timeout S                  how long starting may take (default 180)
  --no-frontend                no front end (ILLM_URL is then not set)
  --no-tls                     a control plane in clear text (--insecure off loopback); by default every
                               process gets a certificate of a CA made for the run (deploy/make-certs.sh,
                               in the log folder's certs/) and the control plane runs over mutual TLS
  --gmanager-arg A, --instance-arg A, --serve-arg A
                               one more argument for every such process (repeatable)
  --setup                      first run deploy/install-deps.sh, deploy/fetch-model.sh and the build
  --run 'CMD'                  once up, run CMD with bash -c, then stop everything
  -- COMMAND [ARGS...]         once up, run COMMAND, then stop everything
EOF
  [ "${CC_NETNS:-0}" = 1 ] && cat <<EOF
  --prefix P                   names of the namespaces and links (default illm: illm-gm, illm-i0..,
                               illm-fe, illm-cl, illm-br0); must start with illm, at most 10 characters
  --subnet A.B.C               the /24 they use (default 10.77.0: bridge .1, gManager .10,
                               instances .11.., front end .20, clients .30)
EOF
  cat <<EOF

The command gets ILLM_GMANAGER (host:port), ILLM_TLS_ARGS (the --tls-* flags of a client's certificate, e.g.
for illm generate --gmanager; unset with --no-tls), ILLM_URL (http://host:port), ILLM_LOG_DIR, ILLM_INSTANCES,
ILLM_PIDS (every process started, gManager first) and ILLM_METRICS_TARGETS (HOST:PORT of every process's
/metrics, also in prometheus-targets.json in the log folder, for Prometheus' file_sd)${CC_NETNS_ENV:-}.
A process that dies while the command runs is reported, and the command goes on (it may be testing exactly that).
EOF
}

cc_need_value() { [ $# -ge 2 ] || cc_die "$1 needs a value (see --help)"; }

cc_parse() {
  while [ $# -gt 0 ]; do
    case "$1" in
      -h | --help) cc_usage; exit 0 ;;
      --instances) cc_need_value "$@"; opt_instances=$2; shift ;;
      --kv-blocks-per-instance) cc_need_value "$@"; opt_kv_blocks=$2; shift ;;
      --port) cc_need_value "$@"; opt_port=$2; shift ;;
      --gmanager-port) cc_need_value "$@"; opt_gm_port=$2; shift ;;
      --illm) cc_need_value "$@"; opt_illm=$2; shift ;;
      --model) cc_need_value "$@"; opt_model=$2; shift ;;
      --threads) cc_need_value "$@"; opt_threads=$2; shift ;;
      --profile) cc_need_value "$@"; opt_profile=$2; shift ;;
      --log-dir) cc_need_value "$@"; opt_log_dir=$2; shift ;;
      --timeout) cc_need_value "$@"; opt_timeout=$2; shift ;;
      --no-frontend) opt_frontend=0 ;;
      --no-tls) opt_tls=0 ;;
      --gmanager-arg) cc_need_value "$@"; opt_gm_args+=("$2"); shift ;;
      --instance-arg) cc_need_value "$@"; opt_instance_args+=("$2"); shift ;;
      --serve-arg) cc_need_value "$@"; opt_serve_args+=("$2"); shift ;;
      --setup) opt_setup=1 ;;
      --run | --run-then-stop) cc_need_value "$@"; opt_run=(bash -c "$2"); shift ;;
      --prefix | --subnet)
        [ "${CC_NETNS:-0}" = 1 ] || cc_die "$1 is an option of deploy/cluster-netns.sh"
        cc_need_value "$@"
        if [ "$1" = --prefix ]; then opt_prefix=$2; else opt_subnet=$2; fi
        shift ;;
      --) shift; [ $# -gt 0 ] || cc_die "-- needs a command"; opt_run=("$@"); break ;;
      *) cc_die "unknown option $1 (see --help)" ;;
    esac
    shift
  done
}

cc_is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

cc_check_options() {
  cc_is_uint "$opt_instances" && [ "$opt_instances" -ge 1 ] && [ "$opt_instances" -le 64 ] ||
    cc_die "--instances $opt_instances: expected 1..64"
  cc_is_uint "$opt_kv_blocks" && [ "$opt_kv_blocks" -ge 2 ] || cc_die "--kv-blocks-per-instance: expected at least 2"
  cc_is_uint "$opt_port" && [ "$opt_port" -le 65535 ] || cc_die "--port $opt_port: expected 0..65535"
  cc_is_uint "$opt_gm_port" && [ "$opt_gm_port" -le 65535 ] || cc_die "--gmanager-port $opt_gm_port: expected 0..65535"
  cc_is_uint "$opt_timeout" && [ "$opt_timeout" -ge 1 ] || cc_die "--timeout $opt_timeout: expected seconds"
  if [ -z "$opt_threads" ]; then
    opt_threads=$(($(nproc) / opt_instances))
    [ "$opt_threads" -ge 1 ] || opt_threads=1
  fi
  cc_is_uint "$opt_threads" || cc_die "--threads $opt_threads: expected a number"
  for tool in setsid curl; do
    command -v "$tool" >/dev/null || cc_die "$tool not found (deploy/install-deps.sh installs what is needed)"
  done
}

cc_check_illm() {
  case "$opt_illm" in /*) ;; *) opt_illm="$PWD/$opt_illm" ;; esac
  [ -x "$opt_illm" ] ||
    cc_die "no illm binary at $opt_illm: build it first (cmake -S . -B build && cmake --build build -j)," \
      "give --illm PATH, or give --setup"
  # Not a pipe into grep -q: it stops reading at the match, and the help's writer then fails with SIGPIPE.
  if [ "$opt_frontend" = 1 ] && ! grep -q -- --gmanager <<<"$("$opt_illm" serve --help 2>/dev/null)"; then
    cc_die "$opt_illm serve has no --gmanager (an older build): rebuild it, or give --no-frontend"
  fi
}

# --setup: what the cluster needs, as deploy/run.sh does it.
cc_setup() {
  "$cc_repo/deploy/install-deps.sh"
  "$cc_repo/deploy/fetch-model.sh"
  cmake -S "$cc_repo" -B "$cc_repo/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$cc_repo/build" -j"$(nproc)"
}

cc_make_log_dir() {
  if [ -n "$opt_log_dir" ]; then
    mkdir -p "$opt_log_dir"
  else
    opt_log_dir=$(mktemp -d "${TMPDIR:-/tmp}/illm-$CC_NAME.XXXXXX")
    cc_log_dir_made=1
  fi
  opt_log_dir=$(cd "$opt_log_dir" && pwd)
}

# With TLS, a CA and a certificate per process in the log folder's certs/.
cc_make_certs() {
  local names=(gmanager frontend client) i
  [ "$opt_tls" = 1 ] || return 0
  for ((i = 0; i < opt_instances; ++i)); do names+=("instance-$i"); done
  "$cc_repo/deploy/make-certs.sh" "$opt_log_dir/certs" "${names[@]}" >"$opt_log_dir/certs.log" 2>&1 ||
    { cat "$opt_log_dir/certs.log" >&2; cc_die "making the certificates failed"; }
  cc_say "mutual TLS on the control plane: certificates in $opt_log_dir/certs"
}

# cc_security NAME: the control-plane flags of the process NAME (its certificate, or --insecure without TLS
# for one that listens off loopback).
cc_security() {
  local name=$1 listens=${2:-0}
  if [ "$opt_tls" = 1 ]; then
    printf '%s\n' --tls-ca "$opt_log_dir/certs/ca.pem" --tls-cert "$opt_log_dir/certs/$name.pem" \
      --tls-key "$opt_log_dir/certs/$name.key"
  elif [ "$listens" = 1 ]; then
    echo --insecure
  fi
}

# ---- processes ---------------------------------------------------------------------------------------------

# cc_start ROLE LOGNAME ARGS...: runs `illm ARGS...` on ROLE's host in its own session, its output in the log.
# ip netns exec and setsid exec what they run, so the pid recorded is illm's own. fd 9 (a lock) stays here.
cc_start() {
  local role=$1 log="$opt_log_dir/$2.log"
  shift 2
  node_wrap "$role"
  setsid "${WRAP[@]}" "$opt_illm" "$@" >"$log" 2>&1 </dev/null 9>&- &
  cc_pid[$role]=$!
  cc_log[$role]=$log
  cc_roles+=("$role")
}

# Alive: exists and is not a zombie waiting to be reaped.
cc_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Reaps ROLE's process (once dead) and records its exit status.
cc_reap() {
  local role=$1 rc=0
  [ -n "${cc_status[$role]:-}" ] && return 0
  wait "${cc_pid[$role]}" 2>/dev/null || rc=$?
  cc_status[$role]=$rc
}

cc_role_name() {
  case "$1" in
    gm) echo "the gManager" ;;
    fe) echo "the front end" ;;
    i*) echo "instance ${1#i}" ;;
  esac
}

cc_show_log() {
  local role=$1
  [ -f "${cc_log[$role]:-}" ] || return 0
  echo "---- $(cc_role_name "$role"): last lines of ${cc_log[$role]}" >&2
  tail -n 25 "${cc_log[$role]}" >&2
}

# Sets cc_dead to the first started role whose process has died (reaped); fails when none has.
cc_find_dead() {
  local role
  for role in "${cc_roles[@]}"; do
    if ! cc_alive "${cc_pid[$role]}"; then
      cc_reap "$role"
      cc_reported[$role]=1
      cc_dead=$role
      return 0
    fi
  done
  return 1
}

cc_fail() {
  cc_failed=1
  cc_say "error: $1"
  [ -n "${2:-}" ] && cc_show_log "$2"
  exit 1
}

cc_log_has() { grep -Eq -- "$2" "${cc_log[$1]}" 2>/dev/null; }

# cc_wait_until WHAT CHECK ARGS...: until CHECK ARGS succeeds; fails when a process dies or at the timeout.
cc_wait_until() {
  local what=$1 deadline=$((SECONDS + opt_timeout))
  shift
  until "$@"; do
    if cc_find_dead; then
      cc_fail "$(cc_role_name "$cc_dead") exited with status ${cc_status[$cc_dead]} while waiting for $what" "$cc_dead"
    fi
    [ "$SECONDS" -lt "$deadline" ] || cc_fail "timed out after $opt_timeout s waiting for $what"
    sleep 0.2
  done
}

cc_instances_joined() {
  local i
  for ((i = 0; i < opt_instances; ++i)); do cc_log_has "i$i" "^illm instance $i: joined" || return 1; done
}

# Each instance's data plane connected to every other instance (their addresses come with the view).
cc_planes_connected() {
  local i j
  for ((i = 0; i < opt_instances; ++i)); do
    for ((j = 0; j < opt_instances; ++j)); do
      [ "$i" = "$j" ] || cc_log_has "i$i" "data plane connected to instance $j\b" || return 1
    done
  done
}

cc_elapsed() { echo "$((SECONDS - cc_t0)) s"; }

cc_health_ok() {
  [ "$(curl -s --noproxy '*' -m 2 -o /dev/null -w '%{http_code}' "$cc_url/health" 2>/dev/null)" = 200 ]
}

# ---- starting ----------------------------------------------------------------------------------------------

cc_model_args() { [ -n "$opt_model" ] && printf '%s\n' --model "$opt_model"; return 0; }

# The instances' profile for the gManager's greedy placement: --profile, or measured here on their thread count.
cc_placement_profile() {
  local model=()
  if [ -n "$opt_profile" ]; then
    [ -r "$opt_profile" ] || cc_die "--profile $opt_profile: cannot read it"
    case "$opt_profile" in /*) ;; *) opt_profile="$PWD/$opt_profile" ;; esac
    return 0
  fi
  mapfile -t model < <(cc_model_args)
  opt_profile="$opt_log_dir/profile.json"
  "$opt_illm" profile --out "$opt_profile" --threads "$opt_threads" --repeats 2 "${model[@]}" \
    >"$opt_log_dir/profile.log" 2>&1 || { cat "$opt_log_dir/profile.log" >&2; cc_die "measuring the profile failed"; }
  cc_say "the instances' profile for the greedy placement is measured ($(cc_elapsed))"
}

cc_start_gmanager() {
  local port security=()
  cc_placement_profile
  mapfile -t security < <(cc_security gmanager 1)
  cc_start gm gmanager gmanager --listen "$(node_addr gm):$opt_gm_port" --profile "$opt_profile" \
    --metrics-listen "$(node_addr gm):0" "${security[@]}" "${opt_gm_args[@]}"
  cc_wait_until "the gManager to listen" cc_log_has gm "^illm gmanager: listening on "
  port=$(sed -n 's/^illm gmanager: listening on [^ ]*:\([0-9]*\) .*/\1/p' "${cc_log[gm]}" | head -n 1)
  [ -n "$port" ] || cc_fail "cannot read the gManager's port from its log" gm
  cc_gmanager="$(node_addr gm):$port"
  cc_say "the gManager listens on $cc_gmanager ($(cc_elapsed))"
}

cc_start_instances() {
  local i model=() security=()
  mapfile -t model < <(cc_model_args)
  for ((i = 0; i < opt_instances; ++i)); do
    mapfile -t security < <(cc_security "instance-$i" 1)
    cc_start "i$i" "instance-$i" instance --join "$cc_gmanager" --id "$i" --kv-blocks-per-instance "$opt_kv_blocks" \
      --threads "$opt_threads" --ucx-tls tcp --ucx-net-devices "$(node_ucx_device "i$i")" "${model[@]}" \
      --metrics-listen "$(node_addr "i$i"):0" "${security[@]}" "${opt_instance_args[@]}"
  done
  cc_wait_until "$opt_instances instances to join" cc_instances_joined
  cc_say "every instance joined ($opt_instances; $(cc_elapsed))"
  cc_wait_until "the instances' data planes to connect to each other" cc_planes_connected
  cc_say "every instance's data plane is connected to the others ($(cc_elapsed))"
}

cc_start_frontend() {
  local model=() port security=()
  mapfile -t model < <(cc_model_args)
  mapfile -t security < <(cc_security frontend)
  cc_start fe frontend serve --gmanager "$cc_gmanager" --host "$(node_addr fe)" --port "$opt_port" "${model[@]}" \
    "${security[@]}" "${opt_serve_args[@]}"
  cc_wait_until "the front end to listen" cc_log_has fe "^illm serve: .* at http://"
  port=$(sed -n 's|^illm serve: .* at http://.*:\([0-9]*\)$|\1|p' "${cc_log[fe]}" | head -n 1)
  [ -n "$port" ] || cc_fail "cannot read the front end's port from its log" fe
  cc_url="http://$(node_addr fe):$port"
  cc_wait_until "the front end's /health to answer 200" cc_health_ok
  cc_say "the front end at $cc_url is healthy ($(cc_elapsed))"
}

# Every process's /metrics (the front end's too), for Prometheus: ILLM_METRICS_TARGETS and, as a file_sd
# target file, prometheus-targets.json in the log folder. Each port is read from the line its process logged.
cc_write_metrics_targets() {
  local i role port targets=() json roles=(gm)
  for ((i = 0; i < opt_instances; ++i)); do roles+=("i$i"); done
  for role in "${roles[@]}"; do
    port=$(sed -n 's|.*: metrics on http://.*:\([0-9]*\)/metrics$|\1|p' "${cc_log[$role]}" | head -n 1)
    [ -n "$port" ] || cc_fail "cannot read the metrics port from its log" "$role"
    targets+=("$(node_addr "$role"):$port")
  done
  [ "$opt_frontend" = 1 ] && targets+=("${cc_url#http://}")
  ILLM_METRICS_TARGETS=$(IFS=,; echo "${targets[*]}")
  json=$(printf '"%s",' "${targets[@]}")
  echo "[{\"targets\": [${json%,}], \"labels\": {\"job\": \"illm\"}}]" >"$opt_log_dir/prometheus-targets.json"
}

cc_summary() {
  local i
  echo "$CC_NAME: up in $((SECONDS - cc_t0)) s; logs in $opt_log_dir"
  echo "  gManager     $cc_gmanager  ($(node_where gm), pid ${cc_pid[gm]})"
  for ((i = 0; i < opt_instances; ++i)); do
    echo "  instance $i   $(node_addr "i$i") UCX tcp on $(node_ucx_device "i$i"), $opt_kv_blocks KV blocks" \
      "($(node_where "i$i"), pid ${cc_pid[i$i]})"
  done
  [ "$opt_frontend" = 1 ] &&
    echo "  front end    $cc_url  ($(node_where fe), pid ${cc_pid[fe]}; OpenAI API under /v1, /health, /metrics)"
  net_summary
  cc_write_metrics_targets
  echo "  metrics      $ILLM_METRICS_TARGETS (/metrics; $opt_log_dir/prometheus-targets.json for file_sd)"
  export ILLM_GMANAGER=$cc_gmanager ILLM_LOG_DIR=$opt_log_dir ILLM_INSTANCES=$opt_instances
  export ILLM_METRICS_TARGETS
  ILLM_PIDS=$(for role in "${cc_roles[@]}"; do printf '%s ' "${cc_pid[$role]}"; done)
  export ILLM_PIDS=${ILLM_PIDS% }
  if [ "$opt_frontend" = 1 ]; then export ILLM_URL=$cc_url; else unset ILLM_URL; fi
  if [ "$opt_tls" = 1 ]; then
    export ILLM_TLS_ARGS="--tls-ca $opt_log_dir/certs/ca.pem --tls-cert $opt_log_dir/certs/client.pem --tls-key $opt_log_dir/certs/client.key"
  else
    unset ILLM_TLS_ARGS
  fi
  for var in ILLM_GMANAGER ILLM_URL ILLM_LOG_DIR ILLM_INSTANCES ILLM_PIDS ILLM_METRICS_TARGETS ILLM_TLS_ARGS ${CC_EXPORTS:-}; do
    [ -n "${!var:-}" ] && echo "export $var='${!var}'"
  done
  return 0
}

# ---- watching, running, stopping ---------------------------------------------------------------------------

# Serves until a signal (the trap exits) or until a process dies.
cc_watch() {
  if [ "$opt_frontend" = 1 ]; then
    cc_say "serving; Ctrl-C (or SIGTERM) stops everything"
  else
    cc_say "up; Ctrl-C (or SIGTERM) stops everything"
  fi
  while true; do
    if cc_find_dead; then
      local why="exited with status ${cc_status[$cc_dead]}: stopping everything"
      cc_fail "$(cc_role_name "$cc_dead") (pid ${cc_pid[$cc_dead]}) $why" "$cc_dead"
    fi
    sleep 0.5
  done
}

# Reports once each process that died while the command runs.
cc_report_deaths() {
  local role
  for role in "${cc_roles[@]}"; do
    [ -n "${cc_reported[$role]:-}" ] && continue
    cc_alive "${cc_pid[$role]}" && continue
    cc_reap "$role"
    cc_reported[$role]=1
    cc_say "$(cc_role_name "$role") (pid ${cc_pid[$role]}) exited with status ${cc_status[$role]}" \
      "while the command runs"
  done
}

# Runs the command in its own session (so that stopping it reaches its children too); returns its status.
cc_run_command() {
  local rc=0
  cc_say "running: ${opt_run[*]}"
  setsid "${opt_run[@]}" <&0 9>&- &
  cc_cmd_pid=$!
  while cc_alive "$cc_cmd_pid"; do
    cc_report_deaths
    sleep 0.2
  done
  wait "$cc_cmd_pid" || rc=$?
  cc_cmd_pid=""
  cc_say "the command exited with status $rc"
  return "$rc"
}

# Sends SIGNAL to a process group led by PID (the command's session), or to PID alone.
cc_signal_group() { kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null || true; }

# cc_stop_roles BOUND ROLES...: SIGTERM to each, SIGKILL to any left after BOUND s (or at a second Ctrl-C).
cc_stop_roles() {
  local bound=$1 role deadline left
  shift
  for role in "$@"; do
    [ -n "${cc_pid[$role]:-}" ] && cc_alive "${cc_pid[$role]}" && kill -TERM "${cc_pid[$role]}" 2>/dev/null
  done
  deadline=$((SECONDS + bound))
  while true; do
    left=()
    for role in "$@"; do [ -n "${cc_pid[$role]:-}" ] && cc_alive "${cc_pid[$role]}" && left+=("$role"); done
    [ ${#left[@]} -eq 0 ] && break
    if [ "$SECONDS" -ge "$deadline" ] || [ "$cc_hurry" = 1 ]; then
      for role in "${left[@]}"; do
        cc_say "$(cc_role_name "$role") (pid ${cc_pid[$role]}) still running: SIGKILL"
        kill -KILL "${cc_pid[$role]}" 2>/dev/null
      done
      sleep 0.2
      continue
    fi
    sleep 0.1
  done
  for role in "$@"; do
    [ -n "${cc_pid[$role]:-}" ] || continue
    cc_reap "$role"
    [ -n "${cc_reported[$role]:-}" ] || cc_say "$(cc_role_name "$role") stopped (status ${cc_status[$role]})"
  done
}

cc_stop_command() {
  local deadline=$((SECONDS + 10))
  [ -n "$cc_cmd_pid" ] || return 0
  cc_say "stopping the command (pid $cc_cmd_pid)"
  cc_signal_group TERM "$cc_cmd_pid"
  while cc_alive "$cc_cmd_pid" && [ "$SECONDS" -lt "$deadline" ] && [ "$cc_hurry" = 0 ]; do sleep 0.1; done
  cc_signal_group KILL "$cc_cmd_pid"
  wait "$cc_cmd_pid" 2>/dev/null
  cc_cmd_pid=""
}

cc_stop_all() {
  local i instances=()
  for ((i = 0; i < opt_instances; ++i)); do instances+=("i$i"); done
  cc_stop_command
  cc_stop_roles 25 fe
  cc_stop_roles 45 "${instances[@]}"
  cc_stop_roles 15 gm
}

cc_on_signal() {
  cc_signal=$1
  cc_say "SIG$1 received: stopping everything"
  exit $((128 + $2))
}

# On every exit: stop the processes, delete the network, keep the logs only when they are wanted.
cc_on_exit() {
  local rc=$?
  set +e
  trap 'cc_hurry=1' INT TERM
  cc_stop_all
  net_down
  if [ -n "$cc_signal" ] && [ ${#opt_run[@]} -eq 0 ] && [ "$cc_failed" = 0 ]; then rc=0; fi
  if [ "$cc_log_dir_made" = 1 ]; then
    if [ "$rc" = 0 ] && [ "$cc_failed" = 0 ]; then
      rm -rf "$opt_log_dir"
    elif ! rmdir "$opt_log_dir" 2>/dev/null; then
      cc_say "logs kept in $opt_log_dir"
    fi
  fi
  cc_say "stopped (exit $rc)"
  exit "$rc"
}

cc_main() {
  local rc=0
  cc_parse "$@"
  cc_check_options
  [ "$opt_setup" = 1 ] && cc_setup
  cc_check_illm
  net_check
  cc_make_log_dir
  trap cc_on_exit EXIT
  trap 'cc_on_signal INT 2' INT
  trap 'cc_on_signal TERM 15' TERM
  cc_make_certs
  cc_t0=$SECONDS
  net_up
  cc_start_gmanager
  cc_start_instances
  [ "$opt_frontend" = 1 ] && cc_start_frontend
  cc_summary
  if [ ${#opt_run[@]} -eq 0 ]; then
    cc_watch
  fi
  cc_run_command || rc=$?
  exit "$rc"
}
