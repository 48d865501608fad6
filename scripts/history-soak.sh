#!/usr/bin/env bash
# The history soak of docs/reliability.md ("The soak"): every fault and the whole workload for
# MINUTES (30 by default) on single servers and, side by side, with shard_1 on a three-node
# Galera cluster (schemaless_store/testing/history; each run starts its own throwaway
# servers). Prints each run's report (operations, faults injected, moves completed, anomalies)
# and exits non-zero if either run found an anomaly or was void.
#   scripts/history-soak.sh [MINUTES] [SEED]      # SEED: the single-server run's; Galera's is SEED+1
set -uo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
seed=${2:-$(python3 -c 'import random; print(random.SystemRandom().randrange(2**31))')}
python=${PYTHON:-.venv/bin/python}
out=${SOAK_DIR:-$(mktemp -d -t schemaless-soak-XXXXXX)}
mkdir -p "$out/single" "$out/galera"
echo "soak: $minutes min, seeds $seed (single servers) and $((seed + 1)) (Galera); histories in $out"
"$python" -m schemaless_store.testing.history --minutes "$minutes" --seed "$seed" \
  --out "$out/single" >"$out/single.log" 2>&1 &
single=$!
"$python" -m schemaless_store.testing.history --minutes "$minutes" --seed "$((seed + 1))" \
  --galera --out "$out/galera" >"$out/galera.log" 2>&1 &
galera=$!
status=0
wait "$single" || status=1
wait "$galera" || status=1
for run in single galera; do
  echo
  echo "=== $run ($out/$run.log, $out/$run/summary.json) ==="
  grep -E '^history: (seed|operations: [0-9]|workload ok|faults injected|kill-commit|moves completed|injection errors|finds proven|version reads|claims checked|anomalies|the run is void)' \
    "$out/$run.log" | awk '!seen[$0]++' || tail -n 30 "$out/$run.log"
done
exit $status
