#!/bin/sh
# layers.sh OBJ...: the call graph between memra-gate's files, from `nm` of their object files
# (a file calls another when it has an undefined symbol the other defines), and a check of the
# layering rule of gate.h: a file calls only files of a lower layer (a higher number) or of its
# own layer that are not its callers. Prints "caller -> callee (symbols)" a line; exit 1 naming
# every call back up, 0 when there is none. A file not named in layer() is layer 9, below all:
# any call it makes reads as UP until it is given its layer here and in gate.h.
set -eu
export LC_ALL=C
layer() {
    case "$1" in
    gate_main) echo 0 ;;
    gate_cli | gate_setup | gate_html) echo 1 ;;
    gate_run | gate_profile | gate_tp | gate_bisect) echo 2 ;;
    gate_pass | gate_dump) echo 3 ;;
    gate_judge) echo 4 ;;
    gate_records) echo 5 ;;
    gate_stop | gate_stats | gate_json) echo 6 ;;
    *) echo 9 ;;
    esac
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for o in "$@"; do
    f=$(basename "$o" | sed 's/\.c\.o$//; s/\.o$//')
    nm -g --defined-only "$o" | awk 'NF == 3 && $2 ~ /[TDBRC]/ {print $3}' | sort -u > "$tmp/$f.def"
    nm -u "$o" | awk '{print $NF}' | sort -u > "$tmp/$f.use"
done
bad=0
for use in "$tmp"/*.use; do
    a=$(basename "$use" .use)
    for def in "$tmp"/*.def; do
        b=$(basename "$def" .def)
        [ "$a" = "$b" ] && continue
        syms=$(comm -12 "$use" "$def" | tr '\n' ' ')
        [ -z "$syms" ] && continue
        la=$(layer "$a") lb=$(layer "$b")
        mark=""
        if [ "$lb" -lt "$la" ]; then mark=" UP"; bad=1; fi
        if [ "$lb" -eq "$la" ] && [ -n "$(comm -12 "$tmp/$b.use" "$tmp/$a.def")" ]; then mark=" CIRCLE"; bad=1; fi
        echo "$a($la) -> $b($lb): $syms$mark"
    done
done
exit $bad
