#!/usr/bin/env bash
# The GPU-bound cells of the paper table (issue 12): BONET, COMs, MINs and DDOM on TF-Bind-8,
# 4 seeds, paper preset, on one CUDA GPU. Records name the device (extra.environment.device and
# .gpu). One prepared command for a lent GPU machine (about 12 minutes of it):
#
#   bash benchmarks/gpu_grid.sh
#
# 1. A smoke run: the quick preset of the four methods on both embedded tasks, on the device
#    (a minute; a method that breaks on the GPU fails here, not after ten minutes).
# 2. The grid, stopped after BUDGET_SECONDS (default 600). `matchopt bench` is resumable: finished
#    cells are skipped, and a running cell keeps a training snapshot (every
#    MATCHOPT_CHECKPOINT_SECONDS, here 60) that the next call continues from. One H100 runs
#    WORKERS cells at once (default 8: these networks are small, a single process leaves most of
#    the GPU idle).
# 3. `matchopt report` of the TF-Bind-8 rows.
# 4. With $OUT set (the device tool's folder that comes back): gpu-records.tgz (records and
#    designs of the grid's methods), gpu-snapshots.tgz.part* (running cells' snapshots, in 15 MB
#    parts, when they fit in 60 MB) and gpu_grid.log. To continue in a later call, copy those
#    files into the checkout's .gpu-carry/ (git-ignored) and name it in the call's carry list:
#    this script unpacks them first.
#
# The machine has no network: data comes from MATCHOPT_DATA_DIR (default .gpu-data/, git-ignored;
# copy design_bench/tf_bind_8-SIX6_REF_R1 and CHECKSUMS.sha256 there and carry it), and matchopt
# runs from the checkout (PYTHONPATH=src) with the machine's own torch.
#
# Check it on a CPU first (same steps, quick preset, a short budget):
#   PRESET=quick MATCHOPT_DEVICE=cpu WORKERS=2 BUDGET_SECONDS=120 RESULTS=/tmp/gpu-check \
#     OUT=/tmp/gpu-out bash benchmarks/gpu_grid.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-results/main}
PRESET=${PRESET:-paper}
METHODS=${METHODS:-bonet,coms,mins,ddom}
SEEDS=${SEEDS:-0,1,2,3}
WORKERS=${WORKERS:-8}
BUDGET_SECONDS=${BUDGET_SECONDS:-600}
export MATCHOPT_DEVICE=${MATCHOPT_DEVICE:-cuda}
export MATCHOPT_CHECKPOINT_SECONDS=${MATCHOPT_CHECKPOINT_SECONDS:-60}
export MATCHOPT_DATA_DIR=${MATCHOPT_DATA_DIR:-.gpu-data}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
LOG=${OUT:+$OUT/gpu_grid.log}
LOG=${LOG:-/dev/null}

say() { echo "[gpu_grid $(date +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }

# 0. What an earlier call sent back.
if [ -d .gpu-carry ]; then
    if [ -f .gpu-carry/gpu-records.tgz ]; then
        tar -xzf .gpu-carry/gpu-records.tgz
        say "unpacked earlier records"
    fi
    if compgen -G ".gpu-carry/gpu-snapshots.tgz.part*" >/dev/null; then
        cat .gpu-carry/gpu-snapshots.tgz.part* | tar -xzf -
        say "unpacked earlier snapshots"
    fi
fi

"$PYTHON" - <<'EOF' 2>&1 | tee -a "$LOG"
import torch

from matchopt.runtime import resolve_device

device = resolve_device(None)
name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
print(f"torch {torch.__version__}, device {device} ({name})")
EOF

# 1. Smoke run on the device.
smoke=$(mktemp -d)
say "smoke: $METHODS, quick preset, potts and styblinski-tang on $MATCHOPT_DEVICE"
smoke_status=0
"$PYTHON" -m matchopt.cli bench --tasks potts,styblinski-tang --methods "$METHODS" --seeds 0 \
    --preset quick --out "$smoke/results" --workers 1 >"$smoke/summary.txt" \
    2>"$smoke/stderr.txt" || smoke_status=$?
# Its warnings and errors without the cells' progress bars, then its whole summary table.
tr '\r' '\n' <"$smoke/stderr.txt" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' \
    | { grep -v -E '^[[:space:]]*$|[0-9]+%\|' || true; } | tail -n 20 | tee -a "$LOG"
tee -a "$LOG" <"$smoke/summary.txt"
rm -rf "$smoke"
if [ "$smoke_status" -ne 0 ]; then
    say "smoke run failed (status $smoke_status): not starting the grid"
    exit "$smoke_status"
fi

# 2. The grid, within the budget (SIGINT: the bench stops, snapshots stay).
say "grid: tfbind8 x $METHODS x seeds $SEEDS, preset $PRESET, $WORKERS workers, ${BUDGET_SECONDS}s"
status=0
timeout --signal=INT --kill-after=60 "$BUDGET_SECONDS" \
    "$PYTHON" -m matchopt.cli bench --tasks tfbind8 --methods "$METHODS" --seeds "$SEEDS" \
    --preset "$PRESET" --out "$RESULTS" --workers "$WORKERS" 2>&1 | tee -a "$LOG" \
    || status=$?
say "grid ended with status $status (124 or 130: stopped at the budget; rerun to continue)"

# 3. The table so far.
"$PYTHON" -m matchopt.cli report "$RESULTS" --tasks tfbind8 2>&1 | tee -a "$LOG" || true

# 4. Send back.
if [ -n "${OUT:-}" ]; then
    records=()
    for method in ${METHODS//,/ }; do
        folder="$RESULTS/tfbind8/$method"
        [ -d "$folder" ] && records+=("$folder")
    done
    if [ ${#records[@]} -gt 0 ]; then
        tar -czf "$OUT/gpu-records.tgz" "${records[@]}"
    fi
    snapshots="$RESULTS/.snapshots/tfbind8"
    if [ -d "$snapshots" ]; then
        size=$(du -sm "$snapshots" | cut -f1)
        if [ "$size" -le 60 ]; then
            tar -czf - "$snapshots" | split -b 15m - "$OUT/gpu-snapshots.tgz.part"
        else
            say "snapshots take ${size} MB, over the 60 MB that can come back: not sent"
        fi
    fi
    say "sent back: $(ls "$OUT" | tr '\n' ' ')"
fi
