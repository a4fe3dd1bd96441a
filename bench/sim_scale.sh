#!/usr/bin/env bash
# Wall time and peak memory to simulate one AlexNet BSP iteration (batch 256/worker, K20
# roofline, 40 GbE star, co-located shards, 512 KiB chunks, DWBP) at several cluster sizes.
# Each size runs in its own process so that peak RSS is that size's.
#   bench/sim_scale.sh [build/apps/poseidon/poseidon] [sizes...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/apps/poseidon/poseidon}
shift || true
sizes=("${@:-8 64 256 1024}")
printf "%8s %10s %12s %14s %12s\n" workers wall_s peak_MiB iteration_ms messages
for n in ${sizes[@]}; do
  out=$(mktemp)
  /usr/bin/time -f "%e %M" -o "$out.time" "$bin" simulate bench/scenarios/alexnet_bsp.yaml \
      --set cluster.machines="$n" --no-baseline --format json > "$out"
  read -r wall kb < "$out.time"
  /usr/bin/python3 - "$out" "$n" "$wall" "$kb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("%8s %10s %12.1f %14.3f %12d" % (sys.argv[2], sys.argv[3], int(sys.argv[4]) / 1024,
                                      r["iteration_ms"], r["network_messages"]))
PY
  rm -f "$out" "$out.time"
done
