import csv
import dataclasses
import io
import json
import math
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from matchopt.errors import MatchoptError
from matchopt.evaluation import percentile
from matchopt.records import RunRecord, write_record
from matchopt.report import (
    load_records,
    mean_normalized_rank,
    percentile_curves,
    rank_distribution,
    rank_methods,
    rank_table,
    records_frame,
    runtime_summary,
    write_report,
)

# (task, method) -> per seed (top score, median score); coms ran one seed on ant only.
CELLS = {
    ("ant", "matchopt"): [(0.9, 0.5), (0.8, 0.5), (0.9, 0.5), (0.8, 0.5)],
    ("ant", "matchopt-noreg"): [(0.7, 0.6)] * 4,
    ("ant", "coms"): [(0.95, 0.1)],
    ("tf_bind", "matchopt"): [(1.0, 0.3)] * 4,
    ("tf_bind", "matchopt-noreg"): [(1.0, 0.2)] * 4,
}


def _record(task, method, seed, top, mid):
    # 127 designs at the median value and one at the top: p100 = top, p50 = mid.
    scores = [mid] * 127 + [top]
    return RunRecord(
        task=task,
        method=method,
        seed=seed,
        preset="quick",
        config={},
        scores=scores,
        p100=top,
        p50=mid,
        offline_best=0.5,
        fit_seconds=1.0 + seed,
        search_seconds=0.5,
        version="test",
        n_designs=len(scores),
    )


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    for (task, method), seeds in CELLS.items():
        for seed, (top, mid) in enumerate(seeds):
            write_record(root, _record(task, method, seed, top, mid), np.zeros((2, 3)))
    # Failed grid cells and other files are not records.
    (root / "ant" / "coms" / "seed1.error.json").write_text('{"error": "boom"}')
    (root / "grid.json").write_text("{}")
    return root


def test_rank_and_mnr_hand_computed_with_ties():
    means = pd.DataFrame({"A": [0.9, 0.2], "B": [0.9, 0.6], "C": [0.5, 0.4]}, index=["t1", "t2"])
    ranks = rank_methods(means)
    # t1: A and B tie for best and share rank 1; C is third (not second).
    assert ranks.loc["t1"].tolist() == [1.0, 1.0, 3.0]
    assert ranks.loc["t2"].tolist() == [3.0, 1.0, 2.0]
    mnr = mean_normalized_rank(means)
    # A: (1/3 + 3/3) / 2, B: (1/3 + 1/3) / 2, C: (3/3 + 2/3) / 2
    assert mnr["A"] == pytest.approx(0.6666666667)
    assert mnr["B"] == pytest.approx(0.3333333333)
    assert mnr["C"] == pytest.approx(0.8333333333)


def test_mnr_with_a_method_missing_on_a_task():
    means = pd.DataFrame({"A": [0.9, 0.1], "B": [0.5, 0.3], "C": [0.7, np.nan]}, index=["a", "b"])
    ranks = rank_methods(means)
    assert math.isnan(ranks.loc["b", "C"])
    # Task b ranks two methods: A 2/2, B 1/2; C is averaged over task a only.
    mnr = mean_normalized_rank(means)
    assert mnr["A"] == pytest.approx((1 / 3 + 1.0) / 2)
    assert mnr["B"] == pytest.approx((3 / 3 + 1 / 2) / 2)
    assert mnr["C"] == pytest.approx(2 / 3)


def test_load_records_sorted_and_ignores_other_files(results):
    records = load_records(results)
    assert len(records) == 17
    keys = [(r.task, r.method, r.seed) for r in records]
    assert keys == sorted(keys)
    assert ("ant", "coms", 1) not in keys


def test_records_frame_percentiles_from_scores(results):
    records = load_records(results)
    frame = records_frame(records, (100, 75.5, 0))
    assert list(frame.columns) == [
        "task", "method", "seed", "preset", "q", "score", "p100", "p50", "wall_seconds"
    ]  # fmt: skip
    assert len(frame) == 3 * len(records)
    for q in (100, 75.5, 0):
        rows = frame[frame["q"] == q]
        expected = [percentile(r.scores, q) for r in records]
        assert rows["score"].tolist() == expected
    assert frame.loc[frame["q"] == 100, "score"].tolist() == [r.p100 for r in records]
    ant_matchopt = frame[(frame["q"] == 0) & (frame["task"] == "ant")].iloc[1:]
    assert ant_matchopt["method"].tolist()[:4] == ["matchopt"] * 4
    assert ant_matchopt["wall_seconds"].tolist()[:4] == [1.5, 2.5, 3.5, 4.5]


def table_lines(text: str) -> list[str]:
    """Lines of the text with markdown table cells unpadded ("| a | b |")."""
    return [
        "| " + " | ".join(c.strip() for c in line.strip().strip("|").split("|")) + " |"
        if line.startswith("|")
        else line
        for line in text.splitlines()
    ]


def test_markdown_tables(results):
    text = write_report(results, (100, 50), "md")
    lines = table_lines(text)
    assert "| Method | ant (published) | ant | tf_bind | MNR |" in lines
    # p100 ranks: ant coms 1, matchopt 2, noreg 3; tf_bind matchopt and noreg tie for 1.
    # MNR: coms 1/3; matchopt (2/3 + 1/2) / 2 = 0.583; noreg (3/3 + 1/2) / 2 = 0.75.
    # Beside each task the paper reports, its number (Hoang et al., ICML 2024, Table 1).
    assert "| coms | 0.885 ± 0.024 | **0.950** (1) [1 seed] | – | 0.333 |" in lines
    assert (
        "| matchopt | 0.931 ± 0.011 | 0.850 ± 0.050 (2) | **1.000 ± 0.000** (1) | 0.583 |" in lines
    )
    assert "| matchopt-noreg | 0.924 | 0.700 ± 0.000 (3) | **1.000 ± 0.000** (1) | 0.750 |" in lines
    # p50: ant noreg 1, matchopt 2, coms 3; tf_bind matchopt 1, noreg 2.
    assert "| coms | 0.557 ± 0.015 | 0.100 (3) [1 seed] | – | 1.000 |" in lines
    assert (
        "| matchopt | 0.611 ± 0.007 | 0.500 ± 0.000 (2) | **0.300 ± 0.000** (1) | 0.583 |" in lines
    )
    assert "| matchopt-noreg | 0.572 | **0.600 ± 0.000** (1) | 0.200 ± 0.000 (2) | 0.667 |" in lines
    assert text.index("percentile 100") < text.index("percentile 50")
    # Ablation: the better of the pair in bold, a tie bolds both.
    assert (
        "| ant | **0.850 ± 0.050** | 0.700 ± 0.000 | 0.500 ± 0.000 | **0.600 ± 0.000** |" in lines
    )
    assert (
        "| tf_bind | **1.000 ± 0.000** | **1.000 ± 0.000** | **0.300 ± 0.000** | 0.200 ± 0.000 |"
        in lines
    )
    # Runtime: mean of fit + search over seeds 0..3 = mean(1.5, 2.5, 3.5, 4.5).
    assert "| coms | 1.5 [1 seed] | – |" in lines
    assert "| matchopt | 3.0 | 3.0 |" in lines
    assert "4 seeds per cell unless marked" in text


def test_latex_tables(results):
    text = write_report(results, (100,), "latex")
    # score, summary, ablation, runtime, missing cells, records of an older format (the
    # fixture's records keep no environment)
    assert text.count("\\begin{tabular}") == 6
    assert text.count("\\toprule") == 6 and text.count("\\bottomrule") == 6
    assert "Method & ant (published) & ant & tf\\_bind & MNR \\\\" in text
    assert "coms & 0.885 $\\pm$ 0.024 & \\textbf{0.950} (1) [1 seed] & -- & 0.333 \\\\" in text
    assert (
        "matchopt & 0.931 $\\pm$ 0.011 & 0.850 $\\pm$ 0.050 (2) & \\textbf{1.000 $\\pm$ 0.000} (1) "
        "& 0.583 \\\\" in text
    )
    assert "**" not in text and "±" not in text


def test_csv_report(results):
    text = write_report(results, (100, 50), "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == [
        "metric",
        "task",
        "method",
        "q",
        "mean",
        "std",
        "n_seeds",
        "rank",
        "mnr",
    ]
    assert "*" not in text
    score = {(r["task"], r["method"], r["q"]): r for r in rows if r["metric"] == "score"}
    assert len(score) == 10
    assert score[("ant", "coms", "100")] == {
        "metric": "score", "task": "ant", "method": "coms", "q": "100", "mean": "0.950",
        "std": "0.000", "n_seeds": "1", "rank": "1", "mnr": "0.333",
    }  # fmt: skip
    assert score[("ant", "matchopt", "100")]["std"] == "0.050"
    assert score[("tf_bind", "matchopt-noreg", "100")]["rank"] == "1"
    assert score[("tf_bind", "matchopt-noreg", "50")]["mnr"] == "0.667"
    times = {(r["task"], r["method"]): r for r in rows if r["metric"] == "wall_seconds"}
    assert times[("ant", "matchopt")]["mean"] == "3.0"
    assert times[("ant", "matchopt")]["n_seeds"] == "4"


def test_filters_and_ablation_note(results):
    text = write_report(results, (100,), "md", methods=["matchopt", "coms"], runtime=False)
    # Ranks among the kept methods only: on ant coms 1 of 2, matchopt 2 of 2.
    assert "| coms | 0.885 ± 0.024 | **0.950** (1) [1 seed] | – | 0.500 |" in table_lines(text)
    assert "Skipped: no records for matchopt-noreg." in text
    assert "Runtime" not in text
    with pytest.raises(MatchoptError, match="no records for method 'nope'"):
        write_report(results, methods=["nope"])


def test_report_is_deterministic(results, tmp_path):
    copy = tmp_path / "elsewhere"
    shutil.copytree(results, copy)
    for fmt in ("md", "latex", "csv"):
        first = write_report(results, (100, 50, 90), fmt)
        assert write_report(results, (100, 50, 90), fmt) == first
        assert write_report(copy, (100, 50, 90), fmt) == first  # no paths in the text


def test_figures_and_their_numbers(results, tmp_path):
    plots = tmp_path / "plots" / "nested"
    write_report(results, (100, 50), "md", plots_dir=plots)
    for stem in ("percentile_curves", "rank_distribution", "ranks_per_task", "runtime"):
        png = plots / f"{stem}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (plots / f"{stem}.csv").stat().st_size > 0
    records = load_records(results)

    curves = pd.read_csv(plots / "percentile_curves.csv")
    pd.testing.assert_frame_equal(curves, percentile_curves(records), check_dtype=False)
    assert sorted(set(curves["q"])) == list(range(101))
    at100 = curves[curves["q"] == 100].set_index("method")
    assert at100.loc["matchopt", "mnr"] == pytest.approx(7 / 12)
    # Mean normalized score: matchopt (0.85 + 1.0) / 2; coms only has ant.
    assert at100.loc["matchopt", "mean_score"] == pytest.approx(0.925)
    assert at100.loc["coms", "mean_score"] == pytest.approx(0.95)

    ranks = pd.read_csv(plots / "rank_distribution.csv")
    pd.testing.assert_frame_equal(ranks, rank_distribution(records, (100, 50)), check_dtype=False)
    row = ranks[(ranks["q"] == 50) & (ranks["task"] == "ant") & (ranks["method"] == "coms")]
    assert row[["rank", "n_ranked"]].values.tolist() == [[3, 3]]

    per_task = pd.read_csv(plots / "ranks_per_task.csv")
    pd.testing.assert_frame_equal(per_task, rank_table(records, (100, 50)), check_dtype=False)
    pd.testing.assert_frame_equal(
        per_task.drop(columns="mnr"), ranks, check_dtype=False
    )  # the same ranks as the distribution, plus each method's MNR at that percentile
    matchopt = per_task[(per_task["q"] == 100) & (per_task["method"] == "matchopt")]
    assert matchopt["mnr"].tolist() == pytest.approx([7 / 12] * 2)  # on ant and tf_bind

    runtime = pd.read_csv(plots / "runtime.csv")
    pd.testing.assert_frame_equal(runtime, runtime_summary(records), check_dtype=False)


@pytest.mark.parametrize("bad", [(101,), (-1,), (50, float("nan")), (), ("50",), 100])
def test_bad_percentiles(results, bad):
    with pytest.raises(MatchoptError, match="percentile"):
        write_report(results, bad)


def test_bad_format(results):
    with pytest.raises(MatchoptError, match="format 'html'"):
        write_report(results, fmt="html")


def test_missing_or_empty_folder(tmp_path):
    with pytest.raises(MatchoptError, match="does not exist"):
        write_report(tmp_path / "nope")
    (tmp_path / "t" / "m").mkdir(parents=True)
    (tmp_path / "t" / "m" / "seed0.error.json").write_text("{}")
    with pytest.raises(MatchoptError, match="no run records"):
        load_records(tmp_path)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not a readable run record"),
        ('{"task": "ant"}', "missing"),
        ("[1, 2]", "not a readable run record"),
    ],
)
def test_corrupt_record_names_the_file(results, content, message):
    path = results / "ant" / "coms" / "seed0.json"
    path.write_text(content)
    with pytest.raises(MatchoptError, match=message) as err:
        write_report(results)
    assert str(path) in str(err.value)


def test_record_with_empty_scores(results):
    path = results / "ant" / "coms" / "seed0.json"
    record = json.loads(path.read_text())
    record["scores"] = []
    path.write_text(json.dumps(record))
    with pytest.raises(MatchoptError, match="scores must be a non-empty list"):
        load_records(results)


def test_record_path_must_match_its_contents(results):
    # A record copied to another seed's file would silently count twice.
    shutil.copy(results / "ant" / "coms" / "seed0.json", results / "ant" / "coms" / "seed3.json")
    with pytest.raises(MatchoptError, match="its path says task 'ant', method 'coms', seed 3"):
        load_records(results)


def test_duplicate_records_in_two_subfolders(results, tmp_path):
    parent = tmp_path / "both"
    shutil.copytree(results, parent / "a")
    shutil.copytree(results, parent / "b")
    with pytest.raises(MatchoptError, match="two records for task 'ant', method 'coms', seed 0"):
        load_records(parent)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"preset": "paper"}, "presets 'quick' and 'paper'"),
        ({"config": {"epochs": 3}}, "configs that differ in epochs"),
        ({"scores": [0.5] * 64, "n_designs": 64}, "128 and 64 designs"),
    ],
)
def test_records_of_another_configuration_are_not_pooled(results, change, message):
    record = dataclasses.replace(_record("ant", "coms", 7, 0.9, 0.5), **change)
    write_record(results, record)
    with pytest.raises(MatchoptError, match=rf"method 'coms': seed 0 and seed 7 .*{message}"):
        load_records(results)
    with pytest.raises(MatchoptError, match="keep each configuration in its own results folder"):
        write_report(results)


def test_a_record_with_a_non_number_score_is_named(results):
    path = results / "ant" / "coms" / "seed0.json"
    record = json.loads(path.read_text())
    record["p100"] = "high"
    path.write_text(json.dumps(record))
    with pytest.raises(MatchoptError, match=r"seed0.json: not a readable run record \(p100 'high'"):
        load_records(results)


def test_published_numbers_are_the_papers():
    from matchopt.published import published_cell, published_scores

    frame = published_scores()
    assert set(frame["percentile"]) == {100.0, 50.0}
    assert published_cell(100, "matchopt", "tfbind8") == "0.977 ± 0.004"
    assert published_cell(50, "matchopt", "tfbind8") == "0.594 ± 0.015"
    assert published_cell(50, "matchopt-noreg", "superconductor") == "0.471"
    assert published_cell(100, "bdi", "tfbind10") == "OOM"
    assert published_cell(100, "random", "tfbind8") is None
    # Every method and task named is one matchopt knows.
    from matchopt.methods import METHODS
    from matchopt.tasks import TASKS

    assert set(frame["method"]) <= set(METHODS) and set(frame["task"]) <= set(TASKS)


#: The paper's Superconductor (SCon) column, p100 and p50 (Tables 1-8), as published.
PAPER_SUPERCONDUCTOR = {
    "ga": ("0.699 ± 0.054", "0.641 ± 0.036"),
    "ens-mean": ("0.716 ± 0.065", "0.644 ± 0.070"),
    "ens-min": ("0.734 ± 0.058", "0.672 ± 0.042"),
    "cma-es": ("0.757 ± 0.013", "0.590 ± 0.012"),
    "mins": ("0.690 ± 0.024", "0.414 ± 0.011"),
    "cbas": ("0.659 ± 0.086", "0.099 ± 0.008"),
    "roma": ("0.704 ± 0.032", "0.420 ± 0.030"),
    "bonet": ("0.500 ± 0.002", "0.470 ± 0.004"),
    "coms": ("0.565 ± 0.012", "0.414 ± 0.023"),
    "matchopt": ("0.732 ± 0.003", "0.439 ± 0.016"),
    "matchopt-noreg": ("0.739", "0.471"),
    "ddom": ("0.570", "0.390"),
    "bdi": ("0.735", "0.480"),
    "bo-qei": ("0.576", "0.490"),
}


def test_the_papers_superconductor_column_is_complete():
    from matchopt.published import published_cell

    for method, (p100, p50) in PAPER_SUPERCONDUCTOR.items():
        assert (published_cell(100, method, "superconductor"), method) == (p100, method)
        assert (published_cell(50, method, "superconductor"), method) == (p50, method)


def test_a_superconductor_record_gets_the_papers_column_beside_ours(tmp_path):
    root = tmp_path / "results"
    for method, seeds in {"matchopt": [(0.8, 0.45), (0.7, 0.43)], "random": [(0.6, 0.3)]}.items():
        for seed, (top, mid) in enumerate(seeds):
            record = dataclasses.replace(
                _record("superconductor", method, seed, top, mid), offline_best=0.3999993
            )
            write_record(root, record)
    lines = table_lines(write_report(root, (100, 50), "md"))
    header = "| Method | superconductor (published) | superconductor | MNR |"
    assert lines.count(header) == 2  # the p100 and the p50 tables
    assert "| matchopt | 0.732 ± 0.003 | **0.750 ± 0.050** (1) | 0.500 |" in lines
    assert "| matchopt | 0.439 ± 0.016 | **0.440 ± 0.010** (1) | 0.500 |" in lines
    assert "| random | – | 0.600 (2) [1 seed] | 1.000 |" in lines
    assert "| offline best | – | 0.400 | – |" in lines


def test_every_planned_method_short_of_seeds_is_listed_with_its_reason(results):
    from matchopt.report import missing_cells

    (results / "pending.csv").write_text(
        "# why cells are missing\ntask,method,reason\n"
        'tf_bind,bonet,"GPU run pending (benchmarks/gpu_grid.sh)"\n'
    )
    records = load_records(results)
    missing = missing_cells(results, records)
    by_cell = {(c.task, c.method): c for c in missing.itertuples(index=False)}
    # The methods the folder planned (a record, a failed cell, a pending entry), never every
    # registered one; each task lacks those it has no 4 seeds of.
    planned = {r.method for r in records} | {"bonet"}
    assert {m for _, m in by_cell} <= planned and "ddom" not in {m for _, m in by_cell}
    assert set(by_cell) == {(t, m) for t in ("ant", "tf_bind") for m in planned} - {
        ("ant", "matchopt"),
        ("ant", "matchopt-noreg"),
        ("tf_bind", "matchopt"),
        ("tf_bind", "matchopt-noreg"),
    }
    assert by_cell["tf_bind", "bonet"].reason == "GPU run pending (benchmarks/gpu_grid.sh)"
    assert by_cell["ant", "coms"].seeds == 1 and by_cell["ant", "coms"].expected == 4
    assert by_cell["ant", "coms"].reason == "failed (seed1.error.json): boom"
    assert by_cell["tf_bind", "coms"].reason == "not run"
    assert by_cell["tf_bind", "coms"].seeds == 0 and by_cell["ant", "bonet"].reason == "not run"
    text = write_report(results, methods=["matchopt", "coms"])
    section = text.split("## Cells missing seeds")[1]
    assert "| ant     | coms     | 1 of 4  | failed (seed1.error.json): boom |" in section
    assert "ddom" not in section  # only the methods asked for


def test_a_pending_file_without_a_reason_is_named(results):
    (results / "pending.csv").write_text("task,method,reason\ntf_bind,bonet,\n")
    with pytest.raises(MatchoptError, match=r"pending.csv, row 2: needs task, method and reason"):
        write_report(results)


def test_runtime_table_names_the_gpu_of_runs_made_on_one(results):
    path = results / "ant" / "coms" / "seed0.json"
    record = json.loads(path.read_text())
    record["extra"] = {"environment": {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3"}}
    path.write_text(json.dumps(record))
    runtime = write_report(results).split("## Runtime")[1]
    assert "(NVIDIA H100 80GB HBM3)" in runtime
    assert runtime.count("(NVIDIA") == 1  # the CPU runs carry no mark


def test_runtime_table_marks_runs_that_read_a_shared_ensemble(results):
    path = results / "tf_bind" / "matchopt" / "seed0.json"
    record = json.loads(path.read_text())
    record["extra"] = {"fit": {"shared_ensemble": {"from_cache": True, "train_seconds": 9.0}}}
    path.write_text(json.dumps(record))
    runtime = write_report(results).split("## Runtime")[1]
    assert runtime.count("(shared ensemble)") == 2  # the cell, and the note that explains it


def _edit_record(path, **changes):
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))  # NaN and Infinity as JSON's usual extension


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"config": []}, r"config \[\] is not an object"),
        ({"extra": "x"}, "extra 'x' is not an object"),
        ({"extra": {"environment": "gpu"}}, "extra.environment 'gpu' is not an object"),
        ({"extra": {"fit": []}}, r"extra.fit \[\] is not an object"),
        ({"extra": {"fit": {"shared_ensemble": 1}}}, "extra.fit.shared_ensemble 1 is not an"),
        ({"offline_best": "abc"}, "offline_best 'abc' is not a number"),
        ({"offline_best": float("nan")}, "offline_best nan is not a finite number"),
        ({"p50": float("inf")}, "p50 inf is not a finite number"),
        ({"preset": None}, "preset None is not a string"),
        ({"version": 1}, "version 1 is not a string"),
        ({"scores": [float("nan")] * 128}, "scores must all be finite numbers: score 0 is nan"),
        # An int too large for a float: not finite, shown cut short.
        ({"scores": [0.5, 10**400]}, r"scores must .*: score 1 is 10000.*\.\.\.\)"),
        ({"fit_seconds": -3.0}, "fit_seconds -3.0 is not in"),
        ({"search_seconds": None}, "search_seconds None is not a number"),
        ({"n_designs": "128"}, "n_designs '128' is not a count"),
        ({"scores": [0.5] * 64}, "64 scores for n_designs 128"),  # a cut file
        ({"extra": {"lab": []}}, r"extra.lab: \[\] is not an object"),
        (
            {"extra": {"lab": {"distinct": 200, "offline_repeats": 0, "unmeasured": 0, "new": 0}}},
            r"extra.lab: distinct 200 is not a count in \[0, 128\]",
        ),
        (
            {"extra": {"lab": dict(distinct=1, offline_repeats=0, unmeasured=0, new=1, p100=None)}},
            "extra.lab: p100 None is not a finite score",
        ),
    ],
)
def test_a_record_with_a_malformed_field_is_refused_naming_file_and_field(
    results, changes, message, capsys
):
    from matchopt.cli import main

    path = results / "ant" / "coms" / "seed0.json"
    _edit_record(path, **changes)
    with pytest.raises(MatchoptError, match=rf"seed0.json: not a readable run record \({message}"):
        load_records(results)
    # The command: one line naming the file and the field, no traceback.
    assert main(["report", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"error": ""}', "no error message in the error file"),
        (b'{"error": null}', "no error message in the error file"),
        (b'{"error": "\\n  \\n"}', "no error message in the error file"),
        (b'{"cell": {}}', "no error message in the error file"),
        (b"[1]", "error file is not a JSON object"),
        (b'"boom"', "error file is not a JSON object"),
        (b"{not json", "error file unreadable or not JSON"),
        (b'{"error": "\xff"}', "error file unreadable or not JSON"),
        (b'{"error": "\\nValueError: x\\nmore"}', "ValueError: x"),
    ],
)
def test_a_malformed_error_file_gives_a_generic_reason(results, content, reason):
    from matchopt.report import missing_cells

    (results / "ant" / "coms" / "seed1.error.json").write_bytes(content)
    missing = missing_cells(results, load_records(results))
    row = missing[(missing["task"] == "ant") & (missing["method"] == "coms")]
    assert row["reason"].tolist() == [f"failed (seed1.error.json): {reason}"]
    assert f"failed (seed1.error.json): {reason}" in write_report(results)


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row, as a renderer splits them (``\\x`` escapes x)."""
    return re.sub(r"\\.", "x", line).split("|")[1:-1]


def test_text_from_files_cannot_forge_markdown_cells_or_drive_the_terminal(results):
    """Reasons in pending.csv, failed cells' errors and task and method names come from files:
    their ``|`` and control characters are escaped, so that every row keeps its cells."""
    (results / "pending.csv").write_text(
        'task,method,reason\ntf_bind,bonet,"GPU | pending | \x1b[31mred\x1b[0m\\|tab\there"\n'
    )
    (results / "ant" / "coms" / "seed1.error.json").write_text(
        json.dumps({"error": "bad | cell\x07 \u202eevil\nTraceback"})
    )
    write_record(results, _record("ant", "evil|method\n| x |", 0, 0.5, 0.5), np.zeros((2, 3)))
    text = write_report(results, (100,))
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    for section in text.split("\n## ")[1:]:
        rows = [line for line in section.splitlines() if line.startswith("|")]
        assert rows and all(len(_cells(row)) == len(_cells(rows[0])) for row in rows), section
    missing = text.split("## Cells missing seeds")[1]
    assert "GPU \\| pending \\| \\\\x1b[31mred\\\\x1b[0m\\\\\\|tab\\\\there" in missing
    assert "failed (seed1.error.json): bad \\| cell\\\\x07 \\\\u202eevil |" in missing
    assert "| evil\\|method\\\\n\\| x \\| " in text
    latex = write_report(results, (100,), "latex")
    assert "\x1b" not in latex and "evil|method\n" not in latex
    assert "evil|method\\textbackslash{}n| x |" in latex
    assert "GPU | pending | \\textbackslash{}x1b[31mred" in latex


def test_latex_escapes_every_special_character():
    from matchopt.report import _escape_latex

    assert _escape_latex("a_b & 50% $x #1 {y} \\ ~z ^w") == (
        "a\\_b \\& 50\\% \\$x \\#1 \\{y\\} \\textbackslash{} \\textasciitilde{}z "
        "\\textasciicircum{}w"
    )
    assert (
        _escape_latex("line\nnext % \x1b") == "line\\textbackslash{}nnext \\% \\textbackslash{}x1b"
    )


def test_a_malformed_published_table_is_one_error_naming_the_file(tmp_path, monkeypatch):
    from matchopt import published

    bad = [
        "table,percentile,method,task,mean,std,note\nT1,100,ga,ant,0.2,0.1,,extra,fields\n",
        "table,percentile,method,task,mean,std,note\nT1,100,ga,ant,high,0.1,\n",
        "table,percentile,method,task,mean\nT1,100,ga,ant,0.2\n",
        "",
    ]
    try:
        for number, content in enumerate(bad):
            path = tmp_path / f"published{number}.csv"
            path.write_text(content)
            monkeypatch.setattr(published, "DATA_FILE", str(path))
            published.published_scores.cache_clear()
            with pytest.raises(MatchoptError, match="not a readable table of published") as err:
                published.published_cell(100, "ga", "ant")
            assert str(path) in str(err.value) and "\n" not in str(err.value)
        monkeypatch.setattr(published, "DATA_FILE", str(tmp_path / "absent.csv"))
        published.published_scores.cache_clear()
        with pytest.raises(MatchoptError, match="absent.csv: not a readable table"):
            published.published_tasks(100)
    finally:
        published.published_scores.cache_clear()


def test_a_pending_file_not_in_utf8_is_named(results):
    (results / "pending.csv").write_bytes(b"task,method,reason\nant,ddom,caf\xe9\n")
    with pytest.raises(MatchoptError, match=r"pending.csv: cannot be read as UTF-8 text"):
        write_report(results)


def test_figures_are_written_atomically(results, tmp_path, monkeypatch):
    import matchopt.report as report

    plots = tmp_path / "plots"
    plots.mkdir()
    stems = ("percentile_curves", "rank_distribution", "ranks_per_task", "runtime")
    names = {f"{stem}.{ext}" for stem in stems for ext in ("png", "csv")}
    for name in names:  # an earlier report's figures
        (plots / name).write_bytes(b"old")
    real = report.atomic_write_bytes
    through = []
    monkeypatch.setattr(report, "atomic_write_bytes", lambda p, d: (through.append(p), real(p, d)))

    # Interrupted while rendering the first figure: the earlier files are left whole.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(FigureCanvasAgg, "print_png", interrupted)
        with pytest.raises(KeyboardInterrupt):
            write_report(results, plots_dir=plots)
    assert {p.name: p.read_bytes() for p in plots.iterdir()} == dict.fromkeys(names, b"old")

    write_report(results, plots_dir=plots)
    assert {p.name for p in through} == names  # every file through the atomic writer
    assert {p.name for p in plots.iterdir()} == names  # no temporary file left
    assert (plots / "runtime.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_over_the_tasks_hand_computed(results, capsys):
    from matchopt.cli import main

    text = write_report(results, (100, 50), "md", summary_only=True)
    lines = table_lines(text)
    header = (
        "| Method | MNR p100 | MNR p50 | mean MNR | tasks | p50 above offline best "
        "| p50 above matchopt p50 |"
    )
    # MNRs as in test_markdown_tables; rows sorted by their mean: matchopt (0.583 + 0.583) / 2,
    # coms (0.333 + 1) / 2 = 0.667, noreg (0.75 + 0.667) / 2 = 0.708. Offline best 0.5 on both
    # tasks; medians: ant matchopt 0.5, noreg 0.6, coms 0.1; tf_bind matchopt 0.3, noreg 0.2.
    rows = [
        "| matchopt | 0.583 | 0.583 | 0.583 | 2 | 0 of 2 | – |",
        "| coms | 0.333 | 1.000 | 0.667 | 1 | 0 of 1 | 0 of 1 |",
        "| matchopt-noreg | 0.750 | 0.667 | 0.708 | 2 | 1 of 2 | 1 of 2 |",
    ]
    start = lines.index(header)
    assert lines[start + 2 : start + 5] == rows
    assert "percentile 100" not in text  # the summary only
    full = table_lines(write_report(results, (100, 50), "md"))
    assert full[full.index(header) + 2 : full.index(header) + 5] == rows
    assert main(["report", str(results), "--summary"]) == 0
    assert capsys.readouterr().out == text
    with pytest.raises(MatchoptError, match="--summary is a table of the md and latex"):
        write_report(results, (100, 50), "csv", summary_only=True)


def test_figures_onto_a_full_disk_are_one_error_naming_the_file(
    results, tmp_path, monkeypatch, capsys
):
    import errno

    import matchopt.report as report
    from matchopt.cli import main

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "atomic_write_bytes", full)
    plots = tmp_path / "plots"
    with pytest.raises(MatchoptError) as caught:
        write_report(results, plots_dir=plots)
    assert str(caught.value) == (
        f"could not write {plots / 'percentile_curves.png'}: No space left on device"
    )
    assert main(["report", str(results), "--plots", str(plots)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"matchopt: error: {caught.value}"]


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("fit_seconds", 1e300, "fit_seconds"),
        ("search_seconds", -1.0, "search_seconds"),
        ("p100", -8e120, "p100"),
        ("scores", [1e30, 0.5], "score 0"),
    ],
)
def test_records_holding_values_no_run_could_write_are_refused(tmp_path, field, value, words):
    import json

    from matchopt.records import read_record

    record = {
        "task": "potts", "method": "random", "seed": 0, "preset": "paper", "config": {},
        "scores": [0.5, 0.4], "p100": 0.5, "p50": 0.4, "offline_best": 0.6,
        "fit_seconds": 1.0, "search_seconds": 1.0, "version": "x", "n_designs": 2, "extra": {},
    }  # fmt: skip
    record[field] = value
    path = tmp_path / "seed0.json"
    path.write_text(json.dumps(record))
    with pytest.raises(MatchoptError, match=words):
        read_record(path)


def test_a_record_of_deeply_nested_brackets_is_one_error(tmp_path):
    from matchopt.records import read_record

    path = tmp_path / "seed0.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MatchoptError, match="not a readable run record"):
        read_record(path)


def test_scores_never_show_a_negative_zero():
    from matchopt.report import _SCORE

    assert _SCORE.format(-0.0004) == "0.000" and _SCORE.format(-0.0006) == "-0.001"
    assert _SCORE.format(0.12345) == "0.123"


def test_records_of_an_older_format_are_marked(results):
    path = results / "ant" / "coms" / "seed0.json"
    record = json.loads(path.read_text())
    record["extra"] = {}
    path.write_text(json.dumps(record))
    for other in results.rglob("seed*.json"):
        if other != path and not other.name.endswith(".error.json"):
            data = json.loads(other.read_text())
            data["extra"] = {"environment": {"device": "cpu"}}
            other.write_text(json.dumps(data))
    section = write_report(results).split("## Records of an older format")[1]
    assert "| ant    | coms     | 0       |" in section and "tf_bind" not in section


def _with_lab(path, new, p100, p50):
    record = json.loads(path.read_text())
    record["extra"]["lab"] = dict(
        distinct=new + 1, offline_repeats=127 - new, unmeasured=0, new=new, p100=p100, p50=p50
    )
    path.write_text(json.dumps(record))


def test_summary_ranks_the_lab_view_beside_the_protocols(results):
    # On tf_bind matchopt leads by the protocol's p50 (0.3 vs 0.2), but its designs repeat the
    # offline table: its lab view has no new design and ranks last there.
    for seed in range(4):
        _with_lab(results / "tf_bind" / "matchopt" / f"seed{seed}.json", 0, None, None)
        _with_lab(results / "tf_bind" / "matchopt-noreg" / f"seed{seed}.json", 50, 0.9, 0.4)
    text = write_report(results, summary_only=True)
    header, _, *rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in rows}
    assert "lab MNR p100" in header and "new designs" in header
    assert cells["matchopt"][-3:] == ["1.000", "1.000", "0.0"]
    assert cells["matchopt-noreg"][-3:] == ["0.500", "0.500", "50.0"]
    assert cells["coms"][-3:] == ["–", "–", "–"]  # no lab view in its records
    full = write_report(results)
    assert "## Lab view" in full


def test_lab_view_counts_distinct_new_repeated_and_unmeasured_designs():
    from matchopt.evaluation import lab_view

    offline = np.array([[0, 1], [1, 1], [2, 2]])
    designs = np.array([[0, 1], [3, 3], [3, 3], [2, 0], [0, 1]])
    scores = np.array([0.1, 0.9, 0.9, 0.4, 0.1])
    view = lab_view(designs, scores, offline, measured=np.array([1, 1, 1, 0, 1], dtype=bool))
    assert view == {
        "distinct": 3,
        "offline_repeats": 2,
        "unmeasured": 1,
        "new": 2,
        "p100": 0.9,
        "p50": percentile([0.9, 0.4], 50),
    }
    none_new = lab_view(offline[:2], np.array([0.2, 0.3]), offline)
    assert none_new["new"] == 0 and none_new["p100"] is None and none_new["p50"] is None


@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/pagemap"])
@pytest.mark.parametrize("command", ["run", "report"])
def test_a_record_that_is_a_link_to_a_device_or_proc_file_is_one_error_line(
    tmp_path, capsys, target, command
):
    """Read whole, such a record was a MemoryError."""
    from matchopt.cli import main

    if not os.path.exists(target):
        pytest.skip(f"no {target}")
    out = tmp_path / "R"
    if command == "report":
        write_record(out, _record("ant", "coms", 0, 0.5, 0.4))
    path = out / "styblinski-tang" / "random" / "seed0.json"
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    if command == "run":
        args = ["run", "--task", "styblinski-tang", "--method", "random", "--preset", "quick"]
        code = main([*args, "--out", str(out)])
    else:
        code = main(["report", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("matchopt: error:")]
    assert str(path) in line
