#!/usr/bin/env bash
# shellcheck disable=SC2317 # the hooks are called from cluster-common.sh
# A local cluster of illm processes on loopback: one gManager, N instances (ids 0..N-1, UCX over tcp on
# lo) and one front end (illm serve --gmanager, the OpenAI-compatible API on 127.0.0.1:8000). It waits
# until the cluster is up, prints the addresses, then serves until Ctrl-C/SIGTERM or until a process
# dies, or runs a command on it (--run 'CMD' or -- CMD ARGS...) and exits with the command's status.
# Everything it started is stopped when it exits. --help lists the options; the code shared with
# deploy/cluster-netns.sh is in deploy/cluster-common.sh.
#
#   deploy/cluster.sh                                  # serve on http://127.0.0.1:8000 until Ctrl-C
#   deploy/cluster.sh --instances 2 -- sh -c 'curl -s $ILLM_URL/health'
set -euo pipefail

CC_NAME=cluster
CC_NETNS=0
# shellcheck source=deploy/cluster-common.sh disable=SC2034
source "$(dirname "${BASH_SOURCE[0]}")/cluster-common.sh"

# Every process runs here, on 127.0.0.1; the data planes use lo.
node_wrap() { WRAP=(); }
node_addr() { echo 127.0.0.1; }
node_where() { echo "loopback"; }
node_ucx_device() { echo lo; }
net_check() { :; }
net_up() { :; }
net_down() { :; }
net_summary() { :; }

cc_main "$@"
