#!/bin/sh
#
# layers.sh - the source tree's layering, checked from its includes: a
# file under src/ includes only headers of its own folder or of a folder
# below it, in the order below (docs/HACKING.md, "The layers"). Files in
# src/ itself (the composition root) may include any.
#
# Exit 0 when every include keeps the order, 1 (and each offending
# include on a line) when one does not, 99 when the tree is not there.

order="lib core tls ops relay spool stream upstream http"

top=${srcdir:-.}
[ -d "$top/src/lib" ] || { echo "layers.sh: $top/src/lib missing" >&2; exit 99; }

rank() {
	i=0
	for l in $order; do
		[ "$l" = "$1" ] && { echo "$i"; return; }
		i=$((i + 1))
	done
	echo -1
}

bad=0
n=0
for dir in $order; do
	mine=$(rank "$dir")
	for f in "$top"/src/"$dir"/*.[ch]; do
		n=$((n + 1))
		for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
			case $h in
			*/*) theirs=$(rank "${h%%/*}") ;;
			*) echo "${f#"$top"/}: #include \"$h\" names no folder"
			   bad=1; continue ;;
			esac
			if [ "$theirs" -lt 0 ] || [ "$theirs" -gt "$mine" ]; then
				echo "${f#"$top"/}: includes $h, a layer above $dir"
				bad=1
			fi
		done
	done
done
[ "$n" -gt 0 ] || { echo "layers.sh: no source files found" >&2; exit 99; }
[ "$bad" -eq 0 ] && echo "layers.sh: $n files, every include from its own layer or below"
exit "$bad"
