#!/usr/bin/env bash
# Entry point of the rdv image. Roles (first argument):
#   server  serves, on $RDV_LISTEN_HOST: an rdv-launcher on :18600 (the
#           client's conformance suite starts its producer workers here)
#           and an rdv-bench server over $RDV_PROTOCOL on :18515
#   client  runs rdv's conformance suite for grpc+verbs and for grpc+ucx
#           over rc_verbs (RDV_CONFORMANCE_SETTINGS: the settings, default
#           "grpc_verbs grpc_ucx_rdma") with its producers in the server
#           container, then rdv-bench against the server
#   any other command runs as given.
# With RDV_ADD_RXE=1 the container first adds its own SoftRoCE device on
# $RDV_RXE_NETDEV (needs NET_ADMIN, the host's network and rdma_rxe);
# otherwise it uses the device it was given (RDV_IB_DEVICE).
# Binaries come from RDV_BUILD_DIR (default: the image's own build).
set -euo pipefail
ulimit -l unlimited

build=${RDV_BUILD_DIR:-/rdv/build/release}
protocol=${RDV_PROTOCOL:-grpc+verbs}
listen_host=${RDV_LISTEN_HOST:?set RDV_LISTEN_HOST to this container\'s address}
say() { echo "entrypoint: $*"; }

add_rxe() {
  local netdev=${RDV_RXE_NETDEV:?set RDV_RXE_NETDEV to the netdev to add rxe on}
  local name=rxe_${netdev}
  rdma link add "$name" type rxe netdev "$netdev"
  for _ in $(seq 100); do
    grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state" 2>/dev/null && break
    sleep 0.1
  done
  grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state" ||
    { say "$name on $netdev never became ACTIVE" >&2; exit 1; }
  export RDV_IB_DEVICE=$name
  say "added $name on $netdev"
}

# Waits (bounded) until host:port accepts a TCP connection.
wait_for_port() {
  local host=$1 port=$2
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  say "nothing listens on $host:$port after 60 s" >&2
  exit 1
}

serve() {
  "$build/apps/rdv-bench" --server --listen "$listen_host:18515" --protocol "$protocol" &
  exec "$build/apps/rdv-launcher" --listen "$listen_host:18600"
}

conformance() {  # setting (grpc_verbs, grpc_ucx_rdma)
  say "conformance suite, setting $1, producers in the server container"
  RDV_TEST_LAUNCHER=$server_host:18600 RDV_TEST_LISTEN_HOST=$listen_host \
    RDV_TEST_REQUIRE_RDMA=1 RDV_TEST_MAX_BYTES=${RDV_TEST_MAX_BYTES:-4194304} \
    "$build/tests/control/rdv_remote_conformance_test" --gtest_filter="*/$1"
}

measure() {
  server_host=${RDV_SERVER_HOST:?set RDV_SERVER_HOST to the server container\'s address}
  wait_for_port "$server_host" 18600
  wait_for_port "$server_host" 18515
  local setting
  for setting in ${RDV_CONFORMANCE_SETTINGS:-grpc_verbs grpc_ucx_rdma}; do
    conformance "$setting"
  done
  say "rdv-bench from this container to the server, $protocol"
  exec "$build/apps/rdv-bench" --client "$server_host:18515" --protocol "$protocol" \
    --sizes "${RDV_BENCH_SIZES:-64K,1M,4M}" --in_flight 8 --iters "${RDV_BENCH_ITERS:-50}"
}

if [[ ${RDV_ADD_RXE:-0} == 1 ]]; then add_rxe; fi
: "${RDV_IB_DEVICE:?set RDV_IB_DEVICE, or RDV_ADD_RXE=1 to add a device}"
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-$RDV_IB_DEVICE:1}
case "${1:-client}" in
  server) serve ;;
  client) measure ;;
  *) exec "$@" ;;
esac
