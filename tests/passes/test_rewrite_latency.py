"""The end-to-end latency judge: interleaved onnxruntime runs, medians and spreads, and the rewrite command's use."""

from __future__ import annotations

import json

import onnx
import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.rewrite import apply_sequence, load_rules  # noqa: E402
from fuseplan.rewrite.latency import LatencyVerdict, Timing, judge_latency  # noqa: E402
from tests.cli.test_cli import fuseplan  # noqa: E402


def _prepared(name: str) -> onnx.ModelProto:
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _enlarged(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every 1x1 convolution made a 3x3 one with zero outer taps: the same outputs, 9x the MACs."""
    import onnx_ir as ir

    sites = load_rules()["enlarge-conv-kernel"].sites(ir.from_proto(model))
    return apply_sequence(model, [{"rule": "enlarge-conv-kernel", "site": list(site)} for site in sites])


def test_the_verdict_needs_the_candidates_middle_half_below_the_originals():
    def verdict(original, candidate):
        return LatencyVerdict(Timing(*original), Timing(*candidate), threads=1, rounds=30, optimization="all")

    assert verdict((10.0, 9.0, 11.0), (8.0, 7.5, 8.9)).faster  # third quartile 8.9 below the first 9.0
    assert not verdict((10.0, 9.0, 11.0), (8.0, 7.0, 9.5)).faster  # a lower median within the spread
    assert not verdict((10.0, 9.0, 11.0), (10.0, 9.0, 11.0)).faster
    assert verdict((10.0, 9.0, 11.0), (8.0, 7.5, 8.9)).change == pytest.approx(-0.2)


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
    assert faster.faster and faster.candidate.q3 < faster.original.q1


@pytest.mark.slow
def test_the_latency_rewrite_writes_the_original_unless_the_graph_found_is_faster_end_to_end(tmp_path):
    out = tmp_path / "out.onnx"
    done = fuseplan("rewrite", "squeezenet", "--objective", "latency", "--budget", "2", "--alpha", "1",
                    "--latency-cache", tmp_path / "cache.json", "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    source, _ = model_path("squeezenet")
    if not report["steps"]:
        pytest.skip("the latency search found no substitution on this machine")
    timing = report["end_to_end"]
    assert timing["rounds"] == 30 and timing["threads"] == 1 and timing["optimization"] == "all"
    for side in ("original", "candidate"):
        assert timing[side]["median_seconds"] > 0 and timing[side]["iqr_seconds"] >= 0
    faster = timing["candidate"]["q3_seconds"] < timing["original"]["q1_seconds"]
    assert timing["faster"] is faster
    assert report["written"] == ("rewritten" if faster else "original")
    written = onnx.load(out)
    if faster:
        assert json.loads({p.key: p.value for p in written.metadata_props}["fuseplan.rewrite"]) == report["steps"]
    else:
        assert written == read_model(source)  # the original, unchanged
