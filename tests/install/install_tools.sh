#!/usr/bin/env bash
# install_tools.sh BUILD_DIR BINDIR LIBDIR (run by ctest): installs BUILD_DIR into a fresh prefix
# outside it (under $TMPDIR) and checks the installed tools as a new user would run them:
#   - memra plugins: searches the prefix's plugins.d only, lists the installed plugins (files
#     under the prefix) with their keys, none failed, no path of the build tree;
#   - memra run and memra-gate (cpu against cpu:stages=2) on the embedded model: they start, and
#     the dynamic loader shows libmemra and every plugin coming from the prefix;
#   - the build tree's own memra still searches that tree only.
set -euo pipefail
build=$(cd "$1" && pwd -P)
bindir=$2
libdir=$3
prefix=$(cd "$(mktemp -d "${TMPDIR:-/tmp}/memra-install.XXXXXX")" && pwd -P)
trap 'rm -rf "$prefix"' EXIT
unset MEMRA_PLUGIN_PATH

fail() {
    echo "install_tools: FAIL: $*" >&2
    exit 1
}
# expect TEXT WHAT PATTERN: TEXT holds a line matching the extended regex PATTERN.
expect() {
    grep -Eq -- "$3" <<<"$1" || { printf '%s\n' "$1" >&2; fail "$2: no line matches '$3'"; }
}
# refuse TEXT WHAT FIXED: TEXT does not contain the string FIXED.
refuse() {
    if grep -Fq -- "$3" <<<"$1"; then
        printf '%s\n' "$1" >&2
        fail "$2: mentions '$3'"
    fi
}

mkdir "$prefix/run"
cmake --install "$build" --prefix "$prefix" >"$prefix/run/install.log" 2>&1 ||
    { cat "$prefix/run/install.log" >&2; fail "cmake --install $build --prefix $prefix"; }
plugins="$prefix/$libdir/memra/plugins.d"
[ -x "$prefix/$bindir/memra" ] || fail "$prefix/$bindir/memra was not installed"
[ -x "$prefix/$bindir/memra-gate" ] || fail "$prefix/$bindir/memra-gate was not installed"
[ -f "$plugins/cpu.backend.manifest" ] || fail "$plugins/cpu.backend.manifest was not installed"
[ ! -e "$prefix/$libdir/memra-build-tree" ] || fail "the build-tree marker was installed"

# Run from a folder that is neither the build tree nor a plugin folder.
cd "$prefix/run"

# 1. memra plugins
out=$("$prefix/$bindir/memra" plugins 2>&1) || { printf '%s\n' "$out" >&2; fail "installed memra plugins failed"; }
dirs=$(sed -n '/^folders searched/,/^$/p' <<<"$out" | grep -E '^ +[0-9]+\. ' || true)
[ "$dirs" = "  1. $plugins" ] || { printf '%s\n' "$out" >&2; fail "memra plugins searched '$dirs', expected only $plugins"; }
expect "$out" "memra plugins" "^cpu +backend +[^ ]+ +ok +$plugins/libmemra-backend-cpu\\.so$"
expect "$out" "memra plugins" "^cpu +sampler +[^ ]+ +ok +$plugins/libmemra-sampler-cpu\\.so$"
expect "$out" "memra plugins" "^default +placement +[^ ]+ +ok +$plugins/libmemra-placement-default\\.so$"
expect "$out" "memra plugins" " 0 failed to load$"
# the keys, with their defaults
expect "$out" "memra plugins keys" "^ +stages=1 +pipeline stages"
expect "$out" "memra plugins keys" "^ +threads=\\(auto\\) +worker threads"
expect "$out" "memra plugins keys" "^ +grain=32768 +"
refuse "$out" "memra plugins" "$build"
refuse "$out" "memra plugins" "faulty" # a test plugin, never installed

# 2. memra run and memra-gate: every shared object the loader opens that is ours comes from the
#    prefix (LD_DEBUG=files prints "calling init: PATH" for each file it loads).
check_loads() { # WHAT LOG
    local loaded
    loaded=$(grep -oE 'calling init: [^ ]*libmemra[^ /]*\.so[^ ]*' "$2" | sed 's/^calling init: //' |
        xargs -r realpath | sort -u || true)
    [ -n "$loaded" ] || { cat "$2" >&2; fail "$1: the loader log names no libmemra file"; }
    grep -q "^$prefix/$libdir/libmemra\\.so" <<<"$loaded" || { printf '%s\n' "$loaded" >&2; fail "$1: libmemra not loaded from $prefix/$libdir"; }
    grep -q "^$plugins/libmemra-backend-cpu\\.so" <<<"$loaded" || { printf '%s\n' "$loaded" >&2; fail "$1: the cpu backend not loaded from $plugins"; }
    local other
    other=$(grep -v "^$prefix/" <<<"$loaded" || true)
    [ -z "$other" ] || { printf '%s\n' "$other" >&2; fail "$1: loaded memra files from outside the prefix"; }
}
log="$prefix/run/ld.log"
LD_DEBUG=files LD_DEBUG_OUTPUT="$log" "$prefix/$bindir/memra" run -n 8 >"$prefix/run/run.out" 2>&1 ||
    { cat "$prefix/run/run.out" >&2; fail "installed memra run failed"; }
expect "$(cat "$prefix/run/run.out")" "memra run" "^[0-9]+( [0-9]+){7}$"
check_loads "memra run" "$(ls "$log".* | head -1)"
rm -f "$log".*

LD_DEBUG=files LD_DEBUG_OUTPUT="$log" "$prefix/$bindir/memra-gate" --a cpu --b cpu:stages=2 --prime 8 --gen 8 --rows 2 \
    --jsonl "$prefix/run/gate.jsonl" >"$prefix/run/gate.out" 2>&1 || { cat "$prefix/run/gate.out" >&2; fail "installed memra-gate failed"; }
grep -q '"record":"verdict"' "$prefix/run/gate.jsonl" || fail "memra-gate wrote no verdict record"
refuse "$(cat "$prefix/run/gate.jsonl")" "memra-gate records" "$build"
check_loads "memra-gate" "$(ls "$log".* | head -1)"

# 3. The build tree's memra searches that tree only.
out=$("$build/bin/memra" plugins 2>&1) || { printf '%s\n' "$out" >&2; fail "build-tree memra plugins failed"; }
dirs=$(sed -n '/^folders searched/,/^$/p' <<<"$out" | grep -E '^ +[0-9]+\. ' || true)
[ "$dirs" = "  1. $build/plugins.d" ] || { printf '%s\n' "$out" >&2; fail "build-tree memra searched '$dirs', expected only $build/plugins.d"; }
refuse "$out" "build-tree memra plugins" "$prefix"
echo "install_tools: passed ($prefix)"
