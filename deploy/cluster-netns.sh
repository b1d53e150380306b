#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2317 # the hooks are called from cluster-common.sh
# The cluster of deploy/cluster.sh with each process on its own "host": a network namespace with its own
# address, joined to a bridge in the root namespace by a veth pair. With the default --prefix illm and
# --subnet 10.77.0:
#
#   illm-br0 (root namespace)  10.77.0.1    the root namespace reaches every host through it
#   illm-gm                    10.77.0.10   illm gmanager --listen 10.77.0.10:PORT
#   illm-i0 .. illm-i<N-1>     10.77.0.11.. illm instance --join 10.77.0.10:PORT --ucx-net-devices eth0
#   illm-fe                    10.77.0.20   illm serve --gmanager 10.77.0.10:PORT --host 10.77.0.20
#   illm-cl                    10.77.0.30   nothing: a host for clients (ILLM_NETNS_CLIENT)
#
# In each namespace the veth end is eth0 (UCX uses it) and lo is up; the root ends are <prefix>-v<host>.
# On start it removes what an earlier run with the same prefix left (its processes, namespaces, links);
# a lock keeps two runs with one prefix apart, and --prefix/--subnet keep runs apart. On exit it stops
# every process and deletes every namespace, veth and the bridge it created. It needs root.
#
#   sudo deploy/cluster-netns.sh                       # serve on http://10.77.0.20:8000 until Ctrl-C
#   sudo deploy/cluster-netns.sh -- sh -c 'ip netns exec $ILLM_NETNS_CLIENT curl -s $ILLM_URL/health'
#
# Options and the run-a-command mode are those of deploy/cluster.sh (--help); shared code is in
# deploy/cluster-common.sh.
set -euo pipefail

# shellcheck disable=SC2034 # read by cluster-common.sh
CC_NAME=cluster-netns
CC_NETNS=1
CC_NETNS_ENV=", ILLM_NETNS_CLIENT (a namespace at .30 to run clients in, as another host; the root
namespace reaches the cluster too) and ILLM_NETNS_PREFIX"
CC_EXPORTS="ILLM_NETNS_CLIENT ILLM_NETNS_PREFIX"
# shellcheck source=deploy/cluster-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster-common.sh"

net_lock_fd_open=0

# ---- hosts -------------------------------------------------------------------------------------------------

# The short name of ROLE's host: gm, i0.., fe, cl.
net_short() { echo "$1"; }
net_ns() { echo "$opt_prefix-$1"; }
net_bridge() { echo "$opt_prefix-br0"; }

node_wrap() { WRAP=(ip netns exec "$(net_ns "$1")"); }
node_where() { echo "namespace $(net_ns "$1")"; }
node_ucx_device() { echo eth0; }

node_addr() {
  case "$1" in
    gm) echo "$opt_subnet.10" ;;
    fe) echo "$opt_subnet.20" ;;
    cl) echo "$opt_subnet.30" ;;
    i*) echo "$opt_subnet.$((11 + ${1#i}))" ;;
  esac
}

# Every host this run has: gManager, instances, front end (when there is one), clients.
net_roles() {
  local i
  echo gm
  for ((i = 0; i < opt_instances; ++i)); do echo "i$i"; done
  [ "$opt_frontend" = 1 ] && echo fe
  echo cl
}

# ---- checks ------------------------------------------------------------------------------------------------

net_check() {
  [ "$(id -u)" = 0 ] || cc_die "needs root (it creates network namespaces, veth pairs and a bridge): run it with sudo"
  command -v ip >/dev/null || cc_die "ip (iproute2) not found"
  command -v flock >/dev/null || cc_die "flock (util-linux) not found"
  [[ "$opt_prefix" =~ ^illm[a-z0-9]{0,6}$ ]] ||
    cc_die "--prefix $opt_prefix: expected illm and at most 6 lowercase letters or digits" \
      "(link names have at most 15 characters)"
  [[ "$opt_subnet" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[1]}" -le 255 ] &&
    [ "${BASH_REMATCH[2]}" -le 255 ] && [ "${BASH_REMATCH[3]}" -le 255 ] ||
    cc_die "--subnet $opt_subnet: expected the first three numbers of a /24, e.g. 10.77.0"
  [ "$opt_instances" -le 9 ] || cc_die "--instances $opt_instances: at most 9 here (addresses .11 to .19)"
  ip netns list >/dev/null 2>&1 || cc_die "network namespaces are not available here (ip netns list failed)"
  net_lock
}

# One run per prefix at a time: a lock on fd 9, held until this script ends (its children do not inherit it).
net_lock() {
  local dir=/run/lock
  [ -d "$dir" ] && [ -w "$dir" ] || dir=/tmp
  net_lock_file="$dir/$opt_prefix-netns.lock"
  exec 9>"$net_lock_file"
  flock -n 9 || cc_die "another deploy/cluster-netns.sh with --prefix $opt_prefix is running" \
    "(lock $net_lock_file): give another --prefix and --subnet"
  net_lock_fd_open=1
}

# ---- creating and deleting ---------------------------------------------------------------------------------

# Namespaces and links with this prefix, whoever created them (an earlier run that was killed, or this one).
net_my_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$opt_prefix-(gm|fe|cl|i[0-9]+)$" || true
}

net_my_links() {
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep -E "^$opt_prefix-(br0|[vp](gm|fe|cl|i[0-9]+))$" || true
}

# Kills what runs in NS (SIGKILL: by now it had its SIGTERM, or it is a leftover), then deletes NS.
net_delete_namespace() {
  local ns=$1 pid
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  ip netns del "$ns" 2>/dev/null || cc_say "warning: cannot delete namespace $ns"
}

# All of them on one line.
net_names() { { net_my_namespaces; net_my_links; } | tr '\n' ' ' | sed 's/ $//'; }

net_delete_all() {
  local ns link
  for ns in $(net_my_namespaces); do net_delete_namespace "$ns"; done
  for link in $(net_my_links); do ip link del "$link" 2>/dev/null || true; done
}

net_remove_leftovers() {
  local left
  left=$(net_names)
  [ -z "$left" ] && return 0
  cc_say "removing what an earlier run with prefix $opt_prefix left: $left"
  net_delete_all
}

# The /24 must not be on an interface already (another run, or this machine's own network).
net_check_subnet_free() {
  local used
  used=$(ip -4 -o addr show | awk -v s="$opt_subnet." 'index($4, s) == 1 {print $2}' | head -n 1)
  [ -z "$used" ] || cc_die "subnet $opt_subnet.0/24 is in use on $used: give another --subnet"
}

# A host: namespace, veth pair (root end on the bridge, the other end eth0 inside), address, lo up.
net_add_host() {
  local role=$1 ns root_end peer
  ns=$(net_ns "$role")
  root_end="$opt_prefix-v$(net_short "$role")"
  peer="$opt_prefix-p$(net_short "$role")"
  ip netns add "$ns"
  ip link add "$root_end" type veth peer name "$peer"
  ip link set "$root_end" master "$(net_bridge)" up
  ip link set "$peer" netns "$ns"
  ip -n "$ns" link set "$peer" name eth0
  ip -n "$ns" addr add "$(node_addr "$role")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

net_up() {
  local role br
  br=$(net_bridge)
  net_remove_leftovers
  net_check_subnet_free
  net_created=1
  ip link add "$br" type bridge
  ip addr add "$opt_subnet.1/24" dev "$br"
  ip link set "$br" up
  for role in $(net_roles); do net_add_host "$role"; done
  cc_say "network up: bridge $br $opt_subnet.1, namespaces $(net_my_namespaces | tr '\n' ' ')"
}

# Deletes everything with this prefix; waits (bounded) until the kernel has removed it, then frees the lock.
net_down() {
  [ "${net_created:-0}" = 1 ] || { net_unlock; return 0; }
  net_delete_all
  for _ in $(seq 50); do [ -z "$(net_my_namespaces)$(net_my_links)" ] && break; sleep 0.1; net_delete_all; done
  local left
  left=$(net_names)
  if [ -n "$left" ]; then cc_say "warning: still present: $left"; else cc_say "network deleted"; fi
  net_unlock
}

net_unlock() {
  [ "$net_lock_fd_open" = 1 ] || return 0
  rm -f "$net_lock_file"
  exec 9>&-
  net_lock_fd_open=0
}

net_summary() {
  echo "  clients      $(node_addr cl)  (namespace $(net_ns cl): ip netns exec $(net_ns cl) COMMAND;" \
    "or here, through $(net_bridge) $opt_subnet.1)"
  export ILLM_NETNS_CLIENT ILLM_NETNS_PREFIX=$opt_prefix
  ILLM_NETNS_CLIENT=$(net_ns cl)
}

cc_main "$@"
