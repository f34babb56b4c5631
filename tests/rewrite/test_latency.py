"""The end-to-end latency judge: interleaved onnxruntime runs, medians and spreads, and the rewrite command's use."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.rewrite import apply_sequence, load_rules  # noqa: E402
from fuseplan.rewrite.latency import (  # noqa: E402
    LatencyVerdict, PairedRounds, judge_latency, judged_faster, median_interval)
from tests.cli.test_cli import fuseplan  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _prepared(name: str) -> onnx.ModelProto:
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _enlarged(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every 1x1 convolution made a 3x3 one with zero outer taps: the same outputs, 9x the MACs."""
    import onnx_ir as ir

    sites = load_rules()["enlarge-conv-kernel"].sites(ir.from_proto(model))
    return apply_sequence(model, [{"rule": "enlarge-conv-kernel", "site": list(site)} for site in sites])


def _rounds(original: list[float], ratios: list[float]) -> PairedRounds:
    return PairedRounds(tuple(original), tuple(a * r for a, r in zip(original, ratios, strict=True)))


def test_the_median_interval_is_the_sign_tests_order_statistics():
    values = [float(v) for v in range(30)]
    assert median_interval(values) == (9.0, 20.0)  # the 10th and 21st of 30 at 95%
    assert median_interval(values[:10]) == (1.0, 8.0)
    assert median_interval(values[:5]) == (0.0, 4.0)  # too few values for 95%: the whole range
    assert median_interval(list(reversed(values))) == (9.0, 20.0)


def test_a_load_that_slows_both_members_of_each_pair_is_no_difference():
    # load that comes and goes between rounds moves both runs of a pair, so the ratios stay near 1
    original = [0.0309 if r % 3 else 0.0243 for r in range(30)]
    steady = _rounds(original, [1.0 + 0.01 * (-1) ** r for r in range(30)])
    assert steady.median_ratio == pytest.approx(1.0, abs=0.011) and not steady.says_faster()
    assert not judged_faster(steady, steady)


def test_one_set_that_says_faster_is_not_enough_without_its_confirmation():
    # a copy once came out 24.3 against 30.9 ms in one set of runs; fresh sessions timed again show no difference
    lucky = _rounds([0.0309] * 30, [0.0243 / 0.0309] * 30)
    assert lucky.says_faster()
    again = _rounds([0.0300 + 0.0001 * (r % 4) for r in range(30)], [1.0 + 0.02 * (-1) ** r for r in range(30)])
    assert not again.says_faster()
    assert not judged_faster(lucky, again) and not judged_faster(lucky, None)
    assert judged_faster(lucky, lucky)


def test_faster_needs_the_whole_interval_below_one_minus_the_minimum_gain_in_both_sets():
    original = [0.010 + 0.0001 * (r % 7) for r in range(30)]
    ten_percent = _rounds(original, [0.9 + 0.001 * (r % 5) for r in range(30)])
    assert ten_percent.interval()[1] < 0.98 and ten_percent.says_faster()
    assert judged_faster(ten_percent, ten_percent)
    assert not judged_faster(ten_percent, None)  # never confirmed
    copy_like = _rounds(original, [0.9 if r % 2 else 1.05 for r in range(30)])  # half the rounds faster
    assert not copy_like.says_faster()
    assert not judged_faster(ten_percent, copy_like)  # the confirmation set disagrees
    # eight rounds in ten 1% faster: the interval lies below 1, not below 0.98
    barely = _rounds(original, [0.99 if r % 5 else 1.1 for r in range(30)])
    assert barely.median_ratio == pytest.approx(0.99) and not barely.says_faster()
    assert barely.says_faster(min_gain=0.0)


def test_the_verdict_records_both_sets_strictly():
    original = [0.010] * 30
    first = _rounds(original, [0.8] * 30)
    verdict = LatencyVerdict(first, first, threads=2, rounds=30, optimization="all")
    record = json.loads(json.dumps(verdict.record(), allow_nan=False))
    assert record["faster"] is True and record["change"] == pytest.approx(-0.2)
    assert record["first"]["rounds_candidate_faster"] == 30 and record["confirmation"]["says_faster"] is True
    assert record["ratio_interval"] == [pytest.approx(0.8), pytest.approx(0.8)]
    assert verdict.original.median == pytest.approx(0.010) and verdict.candidate.median == pytest.approx(0.008)
    unconfirmed = LatencyVerdict(_rounds(original, [1.0] * 30), None, threads=1, rounds=30, optimization="all")
    assert unconfirmed.record()["confirmation"] is None and not unconfirmed.faster


# Whether a copy is ever judged faster is a rate that depends on the machine's load (a two-thread copy of
# squeezenet was once judged faster, 24.3 against 30.9 ms, beside another test worker), so it is not asserted
# here: the decision rule is tested on fixed timings above, and the timing itself below.
@pytest.mark.slow
def test_a_copy_of_the_original_is_timed_end_to_end_into_a_strict_record():
    squeezenet = _prepared("squeezenet")
    copy = onnx.ModelProto()
    copy.CopyFrom(squeezenet)
    for threads in (1, 2):
        verdict = judge_latency(squeezenet, copy, threads=threads, rounds=30)
        assert verdict.original.median > 0 and verdict.candidate.median > 0
        assert verdict.original.q1 <= verdict.original.median <= verdict.original.q3
        assert verdict.candidate.q1 <= verdict.candidate.median <= verdict.candidate.q3
        record = json.loads(json.dumps(verdict.record(), allow_nan=False))
        assert record["faster"] is verdict.faster and record["threads"] == threads and record["rounds"] == 30


@pytest.mark.slow
def test_nine_times_the_work_is_judged_slower_and_removing_it_faster():
    squeezenet = _prepared("squeezenet")
    enlarged = _enlarged(squeezenet)
    def convolutions(model):
        return sum(n.op_type == "Conv" for n in model.graph.node)

    assert convolutions(enlarged) == convolutions(squeezenet)
    slower = judge_latency(squeezenet, enlarged, rounds=30)
    assert not slower.faster and slower.gain < 0
    faster = judge_latency(enlarged, squeezenet, rounds=30)
    assert faster.faster and faster.confirmation is not None and faster.change < -0.1


@pytest.mark.slow
def test_the_latency_rewrite_writes_the_original_unless_the_graph_found_is_faster_end_to_end(tmp_path):
    # The benchmarks' per-operator times (a copy): every configuration this search prices is in it, so it finds
    # the same substitutions on every machine (measuring them afresh, it found none on a busy one); only the
    # end-to-end verdict is timed here.
    cache = tmp_path / "cache.json"
    shutil.copyfile(ROOT / "benchmarks" / "results" / "rewrite_latency_cache.json", cache)
    before = cache.read_bytes()
    out = tmp_path / "out.onnx"
    done = fuseplan("rewrite", "resnet18", "--objective", "latency", "--budget", "2", "--alpha", "1",
                    "--latency-cache", cache, "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    source, _ = model_path("resnet18")
    assert cache.read_bytes() == before  # nothing was timed per operator
    assert report["steps"]
    timing = report["end_to_end"]
    assert timing["rounds"] == 30 and timing["threads"] == 1 and timing["optimization"] == "all"
    for side in ("original", "candidate"):
        assert timing[side]["median_seconds"] > 0 and timing[side]["iqr_seconds"] >= 0
    assert timing["first"]["says_faster"] is (timing["first"]["ratio_interval"][1] < 1 - timing["min_gain"])
    confirmed = timing["confirmation"] is not None and timing["confirmation"]["says_faster"]
    faster = timing["first"]["says_faster"] and confirmed
    assert timing["faster"] is faster
    assert report["written"] == ("rewritten" if faster else "original")
    written = onnx.load(out)
    if faster:
        assert json.loads({p.key: p.value for p in written.metadata_props}["fuseplan.rewrite"]) == report["steps"]
    else:
        assert written == read_model(source)  # the original, unchanged
