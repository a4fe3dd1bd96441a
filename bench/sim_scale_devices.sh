#!/usr/bin/env bash
# Wall time and peak memory to simulate one iteration of AlexNet and ResNet-50 on machines of 8
# devices (the three-level hybrid: one client per machine), at several machine counts. The
# scenario is bench/scenarios/alexnet_bsp.yaml (batch 256 per device, K20 roofline, 40 GbE star,
# one shard per machine, 512 KiB chunks, DWBP, SACP `paper`) with 8 devices per machine joined as
# in a DGX-1 (scenarios/interconnects/dgx1_v100.yaml). Each run is its own process, so that peak
# RSS is that run's.
#   bench/sim_scale_devices.sh [build/apps/poseidon/poseidon] [machines...]   (default 128 2048)
#   SIM_SET="cluster.device=h100 cluster.precision=bf16" bench/sim_scale_devices.sh   # more --set
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/apps/poseidon/poseidon}
shift || true
sizes=("${@:-128 2048}")
extra=()
for kv in ${SIM_SET:-}; do extra+=(--set "$kv"); done
printf "%-9s %9s %8s %10s %12s %14s %12s %12s\n" model machines devices wall_s peak_MiB \
    iteration_ms messages events
for model in alexnet resnet50; do
  for n in ${sizes[@]}; do
    out=$(mktemp)
    /usr/bin/time -f "%e %M" -o "$out.time" "$bin" simulate bench/scenarios/alexnet_bsp.yaml \
        --set model="$model" --set cluster.machines="$n" --set cluster.devices_per_machine=8 \
        --set cluster.interconnect=dgx1_v100 "${extra[@]}" --no-baseline --format json > "$out"
    read -r wall kb < "$out.time"
    /usr/bin/python3 - "$out" "$model" "$n" "$wall" "$kb" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
n = int(sys.argv[3])
print("%-9s %9d %8d %10s %12.1f %14.3f %12d %12d" % (sys.argv[2], n, 8 * n, sys.argv[4],
      int(sys.argv[5]) / 1024, r["iteration_ms"], r["network_messages"], r["events"]))
PY
    rm -f "$out" "$out.time"
  done
done
