#!/usr/bin/env bash
# What a lent GPU host's call sends back, in at most 8 files of at most 16 MiB (the
# device's $OUT limits): the results DB gzipped, the sweep tables and logs, and, for a
# canary trained in the background (benchmarks/canary_gpu.py with --stop-file), its
# logs and the tars of the candidates that left the plateau (all, if none did). Every
# long call ends with it, so that a host taken back between calls loses nothing sent.
#   bash benchmarks/gpu_lease_out.sh OUT [TRAIN_DIR]
set -uo pipefail
out=$1 train=${2:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
coll=$(mktemp -d)
bash "$repo/images/offline-host.sh" collect "$coll" >/dev/null 2>&1
[ -f "$coll/results.db" ] && gzip -1 -c "$coll/results.db" >"$out/results.db.gz"
tar -czf "$out/tables.tgz" -C "$coll" --exclude results.db --exclude engine-logs.tgz . 2>/dev/null
# Engine logs only while they fit in one file.
if [ -f "$coll/engine-logs.tgz" ] && [ "$(stat -c %s "$coll/engine-logs.tgz")" -lt 15000000 ]; then
  cp "$coll/engine-logs.tgz" "$out/"
fi
rm -rf "$coll"
if [ -n "$train" ] && [ -d "$train" ]; then
  tar -czf "$out/train-logs.tgz" "$train"/*.log "$train"/out/summary.json /tmp/canary-*/train.log 2>/dev/null
  if [ ! -f "$train/out/summary.json" ]; then
    # Still training: the newest --save-every tars (resume.pt inside); a fresh host resumes them
    # (canary_gpu.py --from, or as a BUILD_TAR of gpu_nemotronh_prep.sh).
    ls -t "$train"/out/*.tar 2>/dev/null | head -n 3 | while read -r t; do
      [ "$(stat -c %s "$t")" -lt 16000000 ] && cp "$t" "$out/"
    done
  else
    python3 - "$train/out" "$out" <<'EOF'
import json, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
summary = json.loads((src / "summary.json").read_text())
escaped = [n for n, s in summary.items() if s.get("escaped")]
# Those that left the plateau, then the rest, the furthest along first, as many as the
# call's 8 files leave room for: a candidate not sent back loses its resume.pt with the
# host (2026-12-04: two still on stage 1 were, because others had escaped).
key = lambda n: (summary[n]["last"].get("what") == "mtp", summary[n]["last"].get("stage", 0), summary[n]["last"].get("step", 0))
order = sorted(escaped, key=key, reverse=True) + sorted(set(summary) - set(escaped), key=key, reverse=True)
for name in order[:max(0, 8 - len(list(dst.iterdir())))]:
    tar = src / f"{name}.tar"
    if tar.is_file() and tar.stat().st_size < 16_000_000:
        shutil.copy(tar, dst / tar.name)
EOF
  fi
fi
ls -la "$out"
