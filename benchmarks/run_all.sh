#!/usr/bin/env bash
# Runs every benchmark one after the other with the settings used for docs/performance.md.
# Results: benchmarks/results/<name>.json and .txt.  Set up the peers first:
#   bash benchmarks/setup_env.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.bench-venv/bin/python}"
OUT=benchmarks/results
mkdir -p "$OUT"
run() { run_as "$1" "$@"; }
run_as() {  # run_as <results name> <benchmark> [args]
  local out=$1 name=$2; shift 2
  echo "== $out: $PY benchmarks/$name.py $*" | tee "$OUT/$out.txt"
  "$PY" "benchmarks/$name.py" --json "$OUT/$out.json" "$@" 2>&1 | tee -a "$OUT/$out.txt"
}
for b in ${BENCHES:-bfs consolidate count blip_join versioned_view asof asof_merge recursive latency}; do
  case $b in
    # two runs, about 15 and 45 min: every peer and the batched rerun, up to 10^5 and at 10^6
    bfs) run_as bfs_1e4_1e5 bfs --changes 10000,100000 --batch-compare 1000 --ours-limit 1800 --time-limit 600 --check 20
         run_as bfs_1e6 bfs --changes 1000000 --batch-compare 1000 --ours-limit 2400 --time-limit 900 --check 20 ;;
    consolidate) run consolidate --repeat 1 --warmup 0 ;;
    count) run count --repeat 1 --warmup 0 ;;
    blip_join) run blip_join --time-limit 180 ;;
    versioned_view) run versioned_view --time-limit 900 --warmup 1 --repeat 2 ;;
    asof) run asof --time-limit 600 --repeat 3 --warmup 0 ;;
    asof_merge) run_as asof_merge asof --configs M,K --time-limit 600 --repeat 3 --warmup 0 ;;
    recursive) run recursive --edges 100000 --versions 100 --changes 1000 ;;
    latency) run latency --repeat 5 --warmup 1 ;;
  esac
done
