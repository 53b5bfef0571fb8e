#!/usr/bin/env bash
# A worker spawned with --parent_pid shuts down once that parent is killed
# (SIGKILL: no chance to stop it), instead of serving on as an orphan.
#   worker_exits_with_parent.sh RDV_WORKER
set -euo pipefail
worker=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The parent: a shell that starts the worker, records its pid, then waits.
bash -c 'echo $$ > "$1/parent"; "$2" --parent_pid=$$ --task 0 --listen 127.0.0.1:0 \
           --cluster worker=127.0.0.1:1 > "$1/ready" 2> "$1/stderr" & echo $! > "$1/worker"; wait' \
  _ "$dir" "$worker" &

wait_for() {  # wait_for SECONDS COMMAND...: polls COMMAND until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    if ((SECONDS > deadline)); then return 1; fi
    sleep 0.1
  done
}
wait_for 60 grep -q '^rdv-worker ready' "$dir/ready" || { echo "the worker never got ready"; cat "$dir/stderr"; exit 1; }
parent=$(cat "$dir/parent")
worker_pid=$(cat "$dir/worker")
kill -9 "$parent"
if ! wait_for 10 bash -c "! kill -0 $worker_pid 2>/dev/null"; then
  echo "the worker (pid $worker_pid) outlived its killed parent by 10 s"
  kill -9 "$worker_pid"
  exit 1
fi
grep -q "parent process $parent is gone" "$dir/stderr" || { echo "no word of why it stopped:"; cat "$dir/stderr"; exit 1; }
echo "the worker shut down after its parent was killed"
