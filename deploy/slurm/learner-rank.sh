#!/usr/bin/env bash
# One rank of an island, started by learner.sbatch through srun on every node of the
# allocation. It takes its rank from Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), sets
# torchrun's variables from them (RANK, WORLD_SIZE, LOCAL_RANK; MASTER_ADDR and MASTER_PORT come
# from learner.sbatch), writes "PID HOST" to DIR/attemptK.rankR.pid (so that a rank can be found
# by its recorded PID, never by name) and replaces itself with the learner (its JSON events in
# DIR/attemptK.jsonl, ".rankR" added for the ranks after 0):
#   learner-rank.sh cpp DIR K WORKER FLAGS...    diloco-worker WORKER with FLAGS and the island's
#   learner-rank.sh pytorch DIR K PY SCRIPT ARGS...
# Output goes to DIR/attemptK.rankR.log.
set -euo pipefail
kind=$1 dir=$2 attempt=$3
shift 3
export RANK=${SLURM_PROCID:?not in a Slurm step} WORLD_SIZE=${SLURM_NTASKS:?}
export LOCAL_RANK=${SLURM_LOCALID:-0}
: "${MASTER_ADDR:?}" "${MASTER_PORT:?}"
# gloo's address: the interface that holds MASTER_ADDR (rank 0) or routes to it.
if [[ -z ${GLOO_SOCKET_IFNAME:-} ]]; then
  dev=$(ip -o -4 addr show to "$MASTER_ADDR/32" 2>/dev/null | awk '{print $2; exit}')
  [[ -n $dev ]] || dev=$(ip -o route get "$MASTER_ADDR" 2>/dev/null |
    sed -n 's/.* dev \([^ ]*\).*/\1/p')
  [[ -z $dev ]] || export GLOO_SOCKET_IFNAME=$dev
fi
base=$dir/attempt$attempt.rank$RANK
# The event log: DIR/attemptK.jsonl for rank 0, DIR/attemptK.jsonl.rankR for the others (the
# worker and torch_island.py add the suffix).
events=$dir/attempt$attempt.jsonl
echo "$$ $(hostname -s)" >"$base.pid"
exec >>"$base.log" 2>&1
echo "learner-rank.sh: $(date -u +%FT%T) rank $RANK of $WORLD_SIZE on $(hostname -s)," \
  "master $MASTER_ADDR:$MASTER_PORT, attempt $attempt"
case $kind in
  cpp)
    # A worker without the island flags runs alone (learner.sbatch allows one node then).
    if [[ ${DILOCO_ISLAND_FLAGS:-1} == 0 ]]; then exec "$@" --metrics_jsonl="$events"; fi
    exec "$@" --island_rank="$RANK" --island_size="$WORLD_SIZE" \
      --island_master="$MASTER_ADDR:$MASTER_PORT" --metrics_jsonl="$events"
    ;;
  pytorch)
    exec "$@" --metrics_jsonl="$events"
    ;;
  *) echo "learner-rank.sh: unknown kind $kind" >&2; exit 2 ;;
esac
