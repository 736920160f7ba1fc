"""benchmarks/auto_pick.py: the protocol's pick against each seed's leading pool member."""

from benchmark_scripts import load_benchmark

from matchopt.records import RunRecord, write_record


def record(task, method, seed, p100, p50, fit=None):
    return RunRecord(
        task, method, seed, "paper", {}, [p100, p50], p100, p50, 0.5, 1.0, 1.0, "test", 2,
        extra={"fit": fit} if fit else {},
    )  # fmt: skip


def test_picks_are_matched_against_the_leading_member(tmp_path, capsys):
    module = load_benchmark("auto_pick")
    protocol = {"a": 0.1, "b": 0.3}
    for seed, pick in ((0, "b"), (1, "a")):
        write_record(
            tmp_path, record("t", "auto", seed, 0.9, 0.8, {"choice": pick, "protocol": protocol})
        )
        write_record(tmp_path / "x", record("t", "a", seed, 0.9, 0.5))
        write_record(tmp_path / "y", record("t", "b", seed, 0.8, 0.8))
    assert module.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| t | 0 | b (leader) | b |" in out and "| t | 1 | a | b |" in out
    assert "the pick is the leader in 1 of 2 (task, seed) pairs" in out


def test_the_members_runs_may_come_from_another_folder(tmp_path, capsys):
    module = load_benchmark("auto_pick")
    fit = {"choice": "b", "protocol": {"a": 0.2, "b": 1.0}}
    write_record(tmp_path / "round", record("t", "auto", 0, 0.9, 0.8, fit))
    write_record(tmp_path / "dev" / "x", record("t", "a", 0, 0.9, 0.5))
    write_record(tmp_path / "dev" / "y", record("t", "b", 0, 0.8, 0.8))
    assert module.main([str(tmp_path / "round"), "--members", str(tmp_path / "dev")]) == 0
    assert "the pick is the leader in 1 of 1" in capsys.readouterr().out
    assert module.main([str(tmp_path / "round")]) == 1  # no member's run beside it
