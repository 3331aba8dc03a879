#!/usr/bin/env bash
# attn_phases.sh: where attention=mma's decode spends a layer, phase by phase, on llama-1b at two
# prefixes. Needs a carried release build in $CARRY and a probe build's cuda plugin in $PROBE (the
# same code configured with -DCMAKE_CUDA_FLAGS=-DMC_AMM_PROBE, or `#define MC_AMM_PROBE 1` above
# attention_mma.cu's include: a measurement build only, whose kernel prints). For each arm and
# prefix, `memra bench` on the probe plugin and amm_probe.py's medians: from the first block's
# start, the merging block's start, its grid wait's return, its spans' end, its ticket and the
# merge's end; and the bench's tok/s (the probe's printf and atomics cost a little: read speed from
# the release build).
#   CARRY=/tmp/m PROBE=/tmp/probe.so bash bench/gpu/attn_phases.sh [ARM_SUFFIX ...]
. "$(dirname "$0")/common.sh"
: "${PROBE:?set PROBE to the cuda plugin of a probe build}"
P=$OUT/probe-plugins; rm -rf "$P"; cp -r "$B/plugins.d" "$P"; cp "$PROBE" "$P/libmemra-backend-cuda.so"
A=gemv=mma,attention=mma; K="--preset llama-1b --dtype bf16"
ARMS=("$@"); [ ${#ARMS[@]} -gt 0 ] || ARMS=(kv=bf16,attfold=tier kv=bf16,attfold=tier,attdec=warp kv=q8,attfold=tier kv=q8,attfold=tier,attdec=warp kv=bf16)
for arm in "${ARMS[@]}"; do
  for p in ${PREFIXES:-512 7900}; do
    f=$OUT/phases_$(echo "$arm" | tr ',=' '__')_$p.log
    MEMRA_PLUGIN_PATH=$P timeout 120 "$M" bench $K --arm cuda-graph:$A,$arm --prime $p -n 64 --reps 1 > "$f" 2>&1
    tps=$(grep '^| cuda' "$f" | awk -F'|' '{print $6}' | tr -d ' ')
    grep '^amm-probe' "$f" | python3 "$(dirname "$0")/amm_probe.py" "$arm p$p tok/s=$tps" | tee -a "$T"
  done
done
