#!/usr/bin/env bash
# Runs every benchmark one after the other with the settings used for docs/performance.md.
# Results: benchmarks/results/<name>.json and .txt.  Set up the peers first:
#   bash benchmarks/setup_env.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.bench-venv/bin/python}"
OUT=benchmarks/results
mkdir -p "$OUT"
run() {
  local name=$1; shift
  echo "== $name: $PY benchmarks/$name.py $*" | tee "$OUT/$name.txt"
  "$PY" "benchmarks/$name.py" --json "$OUT/$name.json" "$@" 2>&1 | tee -a "$OUT/$name.txt"
}
for b in ${BENCHES:-bfs consolidate count blip_join versioned_view asof}; do
  case $b in
    bfs) run bfs --changes 10000,100000,1000000 --ours-limit 1800 --batch-compare 1000 --time-limit 600 --check 20 ;;
    consolidate) run consolidate --repeat 1 --warmup 0 ;;
    count) run count --repeat 1 --warmup 0 ;;
    blip_join) run blip_join --time-limit 180 ;;
    versioned_view) run versioned_view --time-limit 900 --warmup 1 --repeat 2 ;;
    asof) run asof --time-limit 600 --repeat 3 --warmup 0 ;;
  esac
done
