#!/usr/bin/env bash
# The GPU-bound cells of the paper table (issues 12, 28): BONET, COMs, MINs, DDOM and the Gaussian
# ensemble of Ens-Mean, Ens-Min and GA on TF-Bind-8 (TASK, default tfbind8; benchmarks/superconductor.sh
# runs it with TASK=superconductor), 4 seeds, paper preset, on one CUDA GPU. Records name the device
# (extra.environment.device and .gpu). One prepared command for a lent GPU machine:
#
#   bash benchmarks/gpu_grid.sh
#
# 1. A smoke run: the quick preset of the methods on both embedded tasks, on the device,
#    seeds batched (a minute; a method that breaks on the GPU fails here, not after ten minutes);
#    then `benchmarks/seed_batch_check.py`: seeds 0 and 1 batched against each run alone on
#    the device (the CPU's equality is tested; the GPU's batched kernels may differ).
#    SMOKE=0 skips step 1 (a call continuing an earlier one whose smoke run passed).
# 2. The plan, from a measured rate: `benchmarks/gpu_bound.py` times a few training steps of
#    each method on the device (4 seeds batched; ens-mean, ens-min and ga as one: they share
#    their ensembles, `ensemble` in gpu_bound.py) on TASK's rows and scales them to the paper
#    preset's epochs of TASK's table (e.g. superconductor's 17,014 rows); the script
#    prints each method's expected minutes and
#    keeps, cheapest first, the methods whose expected training fits in what is left of
#    BUDGET_SECONDS (ALL=1 keeps every method: the budget then stops the grid, snapshots let
#    the next call go on). BUDGET_SECONDS (default 540) is the whole script's wall time, steps
#    1 to 5: the device tool stops a command at 600 s, and what a stopped command had not
#    packed would not come back. RESERVE_SECONDS (60) of it are kept for the grid's stop, the
#    report and the packing.
# 3. The grid of the kept methods (`matchopt bench --batch-seeds`), stopped after what is left
#    of the budget. `matchopt bench` is resumable: finished cells are skipped, and a running
#    cell (or batch of seeds) keeps a training snapshot (every MATCHOPT_CHECKPOINT_SECONDS, here
#    60) that the next call continues from. WORKERS cells or batches run at once (default 4).
# 4. `matchopt report` of the task's rows.
# 5. With $OUT set (the device tool's folder that comes back), at most 60 MB in all:
#    gpu-records.tgz (records and designs of the grid's methods), gpu-snapshots.tgz.part*
#    (running cells' snapshots, in 15 MB parts, only when they fit in what is left of the 60 MB)
#    and gpu_grid.log. To continue in a later call, copy those files into the checkout's
#    .gpu-carry/ (git-ignored) and name it in the call's carry list: this script unpacks them
#    first.
#
# The machine has no network: data comes from MATCHOPT_DATA_DIR (default .gpu-data/, git-ignored;
# copy design_bench/tf_bind_8-SIX6_REF_R1 (or the task's folder, e.g. superconductor) and
# CHECKSUMS.sha256 there and carry it), and matchopt
# runs from the checkout (PYTHONPATH=src) with the machine's own torch.
#
# Check it on a CPU first (same steps, quick preset, a short budget):
#   PRESET=quick ALL=1 MATCHOPT_DEVICE=cpu WORKERS=2 BUDGET_SECONDS=600 RATE_STEPS=2 \
#     RESULTS=/tmp/gpu-check OUT=/tmp/gpu-out bash benchmarks/gpu_grid.sh
# (the plan is always the paper preset's: ALL=1 keeps the methods a CPU could never train)
set -euo pipefail
cd "$(dirname "$0")/.."

RESULTS=${RESULTS:-results/main}
TASK=${TASK:-tfbind8}
PRESET=${PRESET:-paper}
METHODS=${METHODS:-bonet,coms,mins,ddom,ens-mean,ens-min,ga}
ENSEMBLE_METHODS="ens-mean ens-min ga"  # one shared ensemble per seed: `ensemble` in the plan
SEEDS=${SEEDS:-0,1,2,3}
WORKERS=${WORKERS:-4}
BUDGET_SECONDS=${BUDGET_SECONDS:-540}  # steps 1-5 in all (the device tool stops a call at 600 s)
RESERVE_SECONDS=${RESERVE_SECONDS:-60}  # of it, kept for the grid's stop, the report, the packing
RATE_STEPS=${RATE_STEPS:-20}  # training steps gpu_bound.py times per method
RETURN_MB=60  # what the device tool can bring back
export MATCHOPT_DEVICE=${MATCHOPT_DEVICE:-cuda}
export MATCHOPT_CHECKPOINT_SECONDS=${MATCHOPT_CHECKPOINT_SECONDS:-60}
export MATCHOPT_DATA_DIR=${MATCHOPT_DATA_DIR:-.gpu-data}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
LOG=${OUT:+$OUT/gpu_grid.log}
LOG=${LOG:-/dev/null}

say() { echo "[gpu_grid $(date +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }
begun=$SECONDS
left() { echo $((BUDGET_SECONDS - RESERVE_SECONDS - (SECONDS - begun))); }  # seconds for steps 1-3

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

# 1. Smoke run and seed-batch check on the device (SMOKE=0 skips both: a call that continues
# an earlier one, whose smoke run passed, keeps its minutes for the grid).
if [ "${SMOKE:-1}" != 0 ]; then
    smoke=$(mktemp -d)
    say "smoke: $METHODS, quick preset, potts and styblinski-tang on $MATCHOPT_DEVICE"
    smoke_status=0
    "$PYTHON" -m matchopt.cli bench --tasks potts,styblinski-tang --methods "$METHODS" --seeds 0,1 \
        --preset quick --out "$smoke/results" --workers 1 --batch-seeds >"$smoke/summary.txt" \
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
    say "batched seeds against their runs alone on $MATCHOPT_DEVICE (quick preset)"
    "$PYTHON" benchmarks/seed_batch_check.py --device "$MATCHOPT_DEVICE" 2>&1 \
        | grep -v '^\[{' | tee -a "$LOG" || say "seed batch check failed (the grid runs anyway)"
fi

# 2. The plan: each method's training of 4 seeds at the rate measured here, cheapest first.
rate_methods=$(echo "${METHODS//,/ }" | tr ' ' '\n' \
    | sed -E 's/^(ens-mean|ens-min|ga)$/ensemble/' | grep -E '^(bonet|mins|coms|ddom|ensemble)$' \
    | awk '!seen[$0]++' | paste -sd, -)
say "measuring the training rate of $rate_methods on $MATCHOPT_DEVICE ($RATE_STEPS steps each)"
plan_file=$(mktemp)
"$PYTHON" benchmarks/gpu_bound.py --task "$TASK" --devices "$MATCHOPT_DEVICE" --methods "$rate_methods" \
    --steps "$RATE_STEPS" --budget "$(($(left) > 0 ? $(left) : 0))" ${ALL:+--keep-all} --plan-file "$plan_file" \
    2>/dev/null | tee -a "$LOG" || true
plan=$(cat "$plan_file")
rm -f "$plan_file"
if [[ ",$plan," == *",ensemble,"* ]]; then  # the grid's methods that share the ensembles
    kept=$(for m in $ENSEMBLE_METHODS; do [[ ",$METHODS," == *",$m,"* ]] && echo "$m"; done | paste -sd, -)
    plan=$(echo "$plan" | sed -E "s/(^|,)ensemble(,|$)/\1$kept\2/")
fi
if [ -z "$plan" ]; then
    say "no method's expected training fits in what is left of ${BUDGET_SECONDS}s: nothing to run (ALL=1 runs anyway)"
elif [ "$(left)" -lt 30 ]; then
    say "$(left)s left of ${BUDGET_SECONDS}s after the smoke run and the rate: no grid this call"
else
    # 3. The grid, within what is left of the budget (SIGINT: the bench stops, snapshots stay;
    # RESERVE_SECONDS cover its stop, the report and the packing).
    grid_seconds=$(left)
    say "grid: $TASK x $plan x seeds $SEEDS, preset $PRESET, seeds batched, $WORKERS workers, ${grid_seconds}s"
    status=0
    timeout --signal=INT --kill-after=30 "$grid_seconds" \
        "$PYTHON" -m matchopt.cli bench --tasks "$TASK" --methods "$plan" --seeds "$SEEDS" \
        --preset "$PRESET" --out "$RESULTS" --workers "$WORKERS" --batch-seeds 2>&1 \
        | tee -a "$LOG" || status=$?
    say "grid ended with status $status (124 or 130: stopped at the budget; rerun to continue)"
fi

# 4. The table so far.
"$PYTHON" -m matchopt.cli report "$RESULTS" --tasks "$TASK" 2>&1 | tee -a "$LOG" || true

# 5. Send back, at most RETURN_MB in all: records first, snapshots if they fit.
if [ -n "${OUT:-}" ]; then
    records=()
    for method in ${METHODS//,/ }; do
        folder="$RESULTS/$TASK/$method"
        [ -d "$folder" ] && records+=("$folder")
    done
    if [ ${#records[@]} -gt 0 ]; then
        tar -czf "$OUT/gpu-records.tgz" "${records[@]}"
    fi
    snapshots="$RESULTS/.snapshots/$TASK"
    if [ -d "$snapshots" ]; then
        tar -czf "$OUT/.snapshots.tgz" "$snapshots"
        used=$(du -cm "$OUT"/* 2>/dev/null | tail -n 1 | cut -f1)
        size=$(du -m "$OUT/.snapshots.tgz" | cut -f1)
        if [ $((used + size)) -le "$RETURN_MB" ]; then
            split -b 15m "$OUT/.snapshots.tgz" "$OUT/gpu-snapshots.tgz.part"
        else
            say "snapshots take ${size} MB compressed, over what is left of ${RETURN_MB} MB: not sent"
        fi
        rm -f "$OUT/.snapshots.tgz"
    fi
    say "sent back: $(ls "$OUT" | tr '\n' ' ')"
fi
