#!/usr/bin/env bash
#
# run.sh - `make fuzz`: run each libFuzzer target for a bounded time.
#
#   run.sh SECONDS SRCDIR WORK_DIR TARGET...
#
# Each target starts from a copy of its seed corpus SRCDIR/corpus/<name>
# in WORK_DIR/<name>/corpus (the source corpus is never written to), with
# SRCDIR/<name>.dict as its dictionary if there is one, and runs for
# SECONDS. A crash, a
# leak, a timeout or a sanitizer report makes it fail; libFuzzer leaves the
# input that did it in WORK_DIR/<name>/ as crash-*, leak-*, timeout-* or
# oom-*. Prints one line per target, which .ci/run reads:
#
#   fuzz: <name>: PASS <runs> runs in <secs> s, corpus <files> files
#   fuzz: <name>: FAIL (exit <rc>) ..., log WORK_DIR/<name>.log
#
# and exits non-zero when any target failed. Targets run FUZZ_JOBS at a
# time (default: the number of CPUs), each for SECONDS: the same fuzzing
# per target in less wall-clock time; the lines come in TARGET order.

set -u

secs=$1 src=$2 work=$3
shift 3

# Leaks are found by LeakSanitizer at the end of each input; UBSan stops
# at the first report (the build has -fno-sanitize-recover=undefined).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1

# fuzz_one TARGET: run it; its lines (and report) go to WORK/<name>.result.
fuzz_one() {
	local target=$1 name dir log rc runs files dict
	name=${target##*/}
	dir=$work/$name
	log=$work/$name.log
	rm -rf "$dir"
	mkdir -p "$dir/corpus"
	if [ -d "$src/corpus/$name" ]; then
		cp "$src/corpus/$name"/* "$dir/corpus/" 2>/dev/null
	fi
	chmod -R u+w "$dir"	# distcheck's sources are read-only
	dict=()
	if [ -f "$src/$name.dict" ]; then
		dict=(-dict="$src/$name.dict")
	fi
	rc=0
	"$target" -max_total_time="$secs" -timeout=10 \
	    -max_len=4096 -print_final_stats=1 \
	    -artifact_prefix="$dir/" "${dict[@]}" "$dir/corpus" \
	    >"$log" 2>&1 </dev/null || rc=$?
	runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 \2/p' \
	    "$log" | tail -n 1)
	files=$(find "$dir/corpus" -type f | wc -l)
	if [ "$rc" -eq 0 ] && [ -n "$runs" ] &&
	    ! grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' \
	    "$log"; then
		echo "fuzz: $name: PASS ${runs% *} runs in ${runs#* } s," \
		    "corpus $files files"
	else
		echo "fuzz: $name: FAIL (exit $rc) ${runs:+${runs% *} runs, }log $log"
		# The report, without libFuzzer's progress lines.
		grep -v '^#[0-9]' "$log" | tail -n 60
		find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o \
		    -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) |
		    sed 's/^/fuzz: artifact: /'
	fi
}

# FUZZ_TAIL_FILE, when set: created once every target has started and
# a CPU is free (fewer than FUZZ_JOBS still run), or at the end: .ci/run
# starts its package check then, on that CPU, never beside a full round.
tail_mark() {
	[ -z "${FUZZ_TAIL_FILE:-}" ] || : >"$FUZZ_TAIL_FILE"
}
trap tail_mark EXIT

mkdir -p "$work"
running=0
for target in "$@"; do
	name=${target##*/}
	rm -f "$work/$name.result"
	fuzz_one "$target" >"$work/$name.result" 2>&1 &
	running=$((running + 1))
	if [ "$running" -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
done
tail_mark
wait
failed=0
for target in "$@"; do
	name=${target##*/}
	if [ -f "$work/$name.result" ]; then
		cat "$work/$name.result"
		grep -q "^fuzz: $name: PASS " "$work/$name.result" || failed=1
	else
		echo "fuzz: $name: FAIL (no result)"
		failed=1
	fi
done
exit "$failed"
