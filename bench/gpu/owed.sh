#!/usr/bin/env bash
# owed.sh: the device call issues 26, 27 and 29 still owe on an H200 (RESULTS, fortieth session on).
# It unpacks a carry made by pack.sh (`bash bench/gpu/pack.sh .carry-r memra_cuda_check_moe
# memra_cuda_wofuse_bench`, carried with carry [".carry-r"]) into /tmp/m, then:
#   unless SKIPMOE: memra_cuda_check_moe (the MoE kernels' exact pairs; any card);
#   stops with exit 9 unless the card is an H200 (WOF_ANY=1: runs wofuse_bench first anyway);
#   wofuse_bench (wo in attention's epilogue: build `wo=fused` only if it saves >= 3 us a
#   llama-1b layer on the H200); checks.sh PARTS within T67_S seconds; unless NOKT, ktrace of
#   8B Q8_0, 8B Q4_K and 30B Q8_0 while the call has time left. The table is printed last;
#   the exit status is 1 if any step failed (its rc is in the table).
#   env: TARBALL (.carry-r/m.tar.xz), PARTS ("moe small dense"), T67_S (420), SKIPMOE, NOKT,
#   WOF_ANY; logs under $OUT (./gpu-logs). Relative paths are from the repository root.
set -u
case "${1:-}" in -h | --help) sed -n '2,12p' "$0" | cut -c3-; exit 0 ;; "") ;;
  *) echo "owed.sh: takes no arguments (see --help)" >&2; exit 2 ;; esac
cd "$(dirname "$0")/../.." || exit 3
# common.sh: OUT, T, FAILED, need_card and the environment of the binaries in CARRY.
export CARRY=/tmp/m
# shellcheck source=bench/gpu/common.sh
. bench/gpu/common.sh
TB=${TARBALL:-.carry-r/m.tar.xz}
[ -f "$TB" ] || { echo "owed.sh: no $TB (make it with bench/gpu/pack.sh, carry it)" | tee -a "$T"; exit 3; }
if ! { mkdir -p "$CARRY" && tar -xJf "$TB" -C "$CARRY"; }; then
  echo "owed.sh: unpacking $TB failed" | tee -a "$T"; exit 3
fi
N=$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)
echo "card: $N" | tee -a "$T"
if [ -z "${SKIPMOE:-}" ]; then
  timeout 200 "$CARRY"/bin/memra_cuda_check_moe > "$OUT/check_moe.log" 2>&1
  rc=$?; [ $rc -eq 0 ] || FAILED=1
  echo "check_moe rc=$rc $(tail -1 "$OUT/check_moe.log")" | tee -a "$T"
fi
wof() {
  timeout 120 "$CARRY"/bin/memra_cuda_wofuse_bench 50 > "$OUT/wofuse.log" 2>&1
  rc=$?; [ $rc -eq 0 ] || FAILED=1
  echo "wofuse rc=$rc t=$SECONDS" | tee -a "$T"
  grep -E '^==|^note|^control|^x after|^FUSED|^  |^summary|rror' "$OUT/wofuse.log" | cut -c1-240 | tee -a "$T"
}
[ -n "${WOF_ANY:-}" ] && wof
need_card H200
[ -n "${WOF_ANY:-}" ] || wof
# shellcheck disable=SC2086 # PARTS is a list of words
timeout "${T67_S:-420}" bash bench/gpu/checks.sh ${PARTS:-moe small dense} > "$OUT/checks.out" 2>&1
rc=$?; [ $rc -eq 0 ] || FAILED=1
echo "checks rc=$rc t=$SECONDS" | tee -a "$T"
if [ -z "${NOKT:-}" ]; then
  for c in "llama-8b q8_0" "llama-8b q4_k" "qwen3moe-30b q8_0"; do
    # shellcheck disable=SC2086 # two words: preset and dtype
    set -- $c
    [ "$SECONDS" -gt 540 ] && { echo "ktrace $1 $2 skipped: t=$SECONDS" | tee -a "$T"; continue; }
    CUDA_INJECTION64_PATH="$CARRY"/lib/libmemra_ktrace.so MEMRA_KTRACE="$OUT/kt-$1-$2.tsv" timeout 60 \
      "$M" bench --preset "$1" --dtype "$2" --arm cuda-graph --prime 512 -n 128 --reps 1 \
      > "$OUT/kt-$1-$2.log" 2>&1
    rc=$?; [ $rc -eq 0 ] || FAILED=1
    echo "ktrace $1 $2 rc=$rc t=$SECONDS" | tee -a "$T"
    if python3 bench/gpu/ktrace.py "$OUT/kt-$1-$2.tsv" 12 > "$OUT/kt-$1-$2.txt" 2>&1; then
      tail -14 "$OUT/kt-$1-$2.txt" | cut -c1-160 >> "$OUT/kt.txt"
    else
      FAILED=1; echo "ktrace.py $1 $2 failed (kt-$1-$2.txt)" | tee -a "$T"
    fi
  done
fi
echo ---; cat "$T"; [ -s "$OUT/kt.txt" ] && { echo; tail -45 "$OUT/kt.txt"; }
exit "$FAILED"
