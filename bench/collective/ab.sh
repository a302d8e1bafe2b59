#!/usr/bin/env bash
# Two builds side by side: in-process allreduce on 4 CPU places (auto: the native pass at small
# sizes; ring and tree through the schedules), the builds alternating round by round so that
# load from elsewhere falls on both alike. Prints one line per (size, algorithm) with each
# build's times per round (us per call, each round the min of 3 rows).
# Usage: bench/collective/ab.sh OLD_LOOM NEW_LOOM [ROUNDS]
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for round in $(seq "$ROUNDS"); do
  for which in OLD NEW; do
    echo "== $which"
    "${!which}" bench collective --places cpu:4 --algo auto,ring,tree -b 4 -e 4M -f 32 -n 200 \
      -w 20 --rounds 3 --stat min | grep -E '^ +[0-9]'
  done
done >"$log"
/usr/bin/python3 - "$log" <<'PY'
import collections, re, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
which = None
for line in open(sys.argv[1]):
    m = re.match(r"== (\w+)", line)
    if m:
        which = m.group(1)
        continue
    f = line.split()
    rows[(int(f[0]), f[4])][which].append(float(f[5]))
print("%10s %12s  %-24s %-24s %s" % ("bytes", "algorithm", "old (us per round)", "new", "best old/new"))
for key in sorted(rows):
    old, new = rows[key]["OLD"], rows[key]["NEW"]
    print("%10d %12s  %-24s %-24s %.2f / %.2f" % (key[0], key[1], " ".join("%.1f" % x for x in old),
                                                 " ".join("%.1f" % x for x in new), min(old), min(new)))
PY
