#!/usr/bin/env bash
# The device transfer (working tree as a tar + the carried .device bundle) must stay under 64 MiB.
#   tools/device_slim.sh out   move bench/results/* but the two newest session folders and the
#                              accuracy study to ../results_stash (outside the repo)
#   tools/device_slim.sh in    move them back (do this before any commit: they are tracked)
#   tools/device_slim.sh size  the MiB that would travel (tree tar + .device)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
stash=../results_stash
size() {
  local t d
  t=$(git ls-files -z --cached --others --exclude-standard | tar cf - --null -T - --ignore-failed-read 2>/dev/null | wc -c)
  d=$( [ -d .device ] && tar cf - .device | wc -c || echo 0)
  awk -v t="$t" -v d="$d" 'BEGIN { printf "tree %.2f MiB + .device %.2f MiB = %.2f MiB (limit 64)\n", t/2^20, d/2^20, (t+d)/2^20 }'
}
case "${1:-}" in
  out)
    mkdir -p "$stash"
    keep=$(ls -d bench/results/session*_gpu | sort -V | tail -2 | tr "\n" " ")
    for d in bench/results/*/; do
      d=${d%/}
      case " $keep bench/results/accuracy_h200_128k " in *" $d "*) continue ;; esac
      mv "$d" "$stash/"
    done
    size ;;
  in)
    [ -d "$stash" ] && for d in "$stash"/*; do [ -e "$d" ] && mv "$d" bench/results/; done
    rmdir "$stash" 2>/dev/null || true
    git status --short bench/results | grep '^ D' && { echo "still missing (above)"; exit 1; } || true
    size ;;
  size) size ;;
  *) echo "usage: $0 out|in|size"; exit 2 ;;
esac
