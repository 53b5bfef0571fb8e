#!/usr/bin/env bash
# Entry point of the rdv image. Roles (first argument):
#   server  serve rdv-bench Sends over $RDV_PROTOCOL on :18515
#   client  run the grpc+verbs conformance suite against this container's
#           device, then rdv-bench against $RDV_SERVER
#   any other command runs as given.
# With RDV_ADD_RXE=1 the container first adds a SoftRoCE device on its
# eth0 (needs NET_ADMIN and a host kernel with rdma_rxe); otherwise it uses
# the RDMA device it was given (/dev/infiniband).
set -euo pipefail
ulimit -l unlimited

add_rxe() {
  local netdev=${RDV_RXE_NETDEV:-eth0} name=rxe_${HOSTNAME:0:8}
  rdma link add "$name" type rxe netdev "$netdev"
  for _ in $(seq 100); do
    grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state" 2>/dev/null && break
    sleep 0.1
  done
  grep -q ACTIVE "/sys/class/infiniband/$name/ports/1/state" ||
    { echo "entrypoint: $name on $netdev never became ACTIVE" >&2; exit 1; }
  export RDV_IB_DEVICE=$name
  echo "entrypoint: added $name on $netdev"
}

if [[ ${RDV_ADD_RXE:-0} == 1 ]]; then add_rxe; fi
protocol=${RDV_PROTOCOL:-grpc+verbs}
case "${1:-client}" in
  server)
    exec rdv-bench --server --listen 0.0.0.0:18515 --protocol "$protocol" ;;
  client)
    RDV_TEST_REQUIRE_RDMA=1 RDV_TEST_MAX_BYTES=${RDV_TEST_MAX_BYTES:-4194304} \
      /rdv/build/release/tests/control/rdv_remote_conformance_test --gtest_filter='*grpc_verbs'
    exec rdv-bench --client "${RDV_SERVER:?set RDV_SERVER=host:port}" --protocol "$protocol" \
      --sizes "${RDV_BENCH_SIZES:-64K,1M,4M}" --in_flight 8 --iters 50 ;;
  *)
    exec "$@" ;;
esac
