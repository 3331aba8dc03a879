# common.sh: what the bench/gpu scripts share (sourced: `. "$(dirname "$0")/common.sh"`): the
# carried binaries (bin, lib, plugins.d of a release build in $CARRY, default .carry-dev), $OUT
# for logs, the table $OUT/table.txt that each script prints last, and the helpers below. Set
# GATE_TIMEOUT / BENCH_TIMEOUT (seconds) before sourcing, or as a prefix of one call
# (`GATE_TIMEOUT=600 gate ...`), to change how long one gate or bench may run.
set -u
export NCCL_NVLS_ENABLE=0 MEMRA_SYNTH_THREADS=16
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
B=${CARRY:-$PWD/.carry-dev}
export LD_LIBRARY_PATH=$B/lib MEMRA_PLUGIN_PATH=$B/plugins.d
G=$B/bin/memra-gate; M=$B/bin/memra
T="$OUT/table.txt"
FAILED=0 # 1 once a gate or bench exits non-zero, a control passes or a refusal is not: `exit "$FAILED"` last
GATE_TIMEOUT=${GATE_TIMEOUT:-300}; BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}

# need_card NAME: stop at once (exit 9, one table line) unless the first GPU's name contains NAME,
# e.g. H200 for a figure an issue's check names that card for: an H100 that came for an
# `nvidia-h200` call is given back before it spends the session's device time on figures that
# do not count. NAME "any" accepts every card.
need_card() { [ "$1" = any ] && return 0
  local n; n=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$n" in *"$1"*) return 0;; esac
  echo "NOT AN $1 (${n:-no GPU}): stopped before any measurement" | tee -a "$T"; exit 9; }

# gate NAME ARGS...: memra-gate ARGS with its records in $OUT/NAME.jsonl; one table line (exit
# status, seconds, verdict and reason, the speed ratio, the largest nmse), and the log's last
# lines when it failed.
gate() { local name=$1; shift; local t0=$SECONDS
  timeout "$GATE_TIMEOUT" "$G" "$@" --quiet --jsonl "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1; local rc=$?
  local v=$(grep '"record":"verdict"' "$OUT/$name.jsonl" 2>/dev/null | grep -o '"pass":[a-z]*\|"reason":"[^"]*"' | tr '\n' ' ' | cut -c1-100)
  local s=$(grep '"record":"summary"' "$OUT/$name.jsonl" 2>/dev/null | grep -o '"ratio_b_over_a":[0-9.]*')
  local n=$(grep -o '"nmse":[0-9.e+-]*' "$OUT/$name.jsonl" 2>/dev/null | cut -d: -f2 | sort -g | tail -1)
  [ $rc -eq 0 ] || FAILED=1
  printf '%-30s rc=%s %3ss %s %s %s\n' "$name" "$rc" "$((SECONDS-t0))" "$v" "$s" "${n:+max_nmse=$n}" | tee -a "$T"
  [ $rc -eq 0 ] || tail -3 "$OUT/$name.log" | cut -c1-200 | tee -a "$T"; }

# control NAME ARGS...: a gate that must fail in exact mode (a negative control): CONTROL FAILED
# in the table when it passes (the verdict record's "pass":true; a gate that could not run is
# no pass, and its exit status is in the line above).
control() { local name=$1 f=$FAILED; shift
  gate "$name" "$@"; FAILED=$f # its failing is the control's point
  grep '"record":"verdict"' "$OUT/$name.jsonl" 2>/dev/null | grep -q '"pass":true' &&
    { FAILED=1; echo "CONTROL FAILED: $name passed exact" | tee -a "$T"; }; }

# refuse NAME WANT ARGS...: the gate must stop before comparing (exit 2 or 3) naming WANT.
refuse() { local name=$1 want=$2; shift 2
  timeout 120 "$G" "$@" --quiet > "$OUT/$name.log" 2>&1; local rc=$?
  if { [ $rc -eq 3 ] || [ $rc -eq 2 ]; } && grep -q -- "$want" "$OUT/$name.log"; then echo "$name refused as expected" | tee -a "$T"
  else FAILED=1; echo "$name NOT REFUSED AS EXPECTED rc=$rc: $(tail -2 "$OUT/$name.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$T"; fi; }

# bench NAME ARGS...: memra bench ARGS; a table line, then every arm's row of its table.
bench() { local name=$1; shift; local t0=$SECONDS
  timeout "$BENCH_TIMEOUT" "$M" bench "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  [ $rc -eq 0 ] || FAILED=1
  echo "$name rc=$rc $((SECONDS-t0))s" | tee -a "$T"
  grep '^| [a-z]' "$OUT/$name.log" | grep -v '^| arm ' | tr -s ' ' | cut -c1-170 | tee -a "$T"; }

# mk PRESET DTYPE: $W/PRESET-DTYPE.gguf made once by memra mkmodel (the caller sets W).
mk() { local f=$W/$1-$2.gguf; [ -s $f ] && return 0; local t0=$SECONDS
  "$M" mkmodel --preset $1 --dtype $2 -o $f > "$OUT/mk-$1-$2.log" 2>&1 ||
    { echo "mkmodel $1 $2 failed" | tee -a "$T"; tail -2 "$OUT/mk-$1-$2.log" | tee -a "$T"; }
  echo "mk $1 $2 $((SECONDS-t0))s $(du -h $f 2>/dev/null | cut -f1)" >> "$T"; }
