"""The onnxruntime sessions every stage times graphs with: one set of options, one clear error."""

from __future__ import annotations

import pytest

ort = pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

from fuseplan.errors import FuseplanError  # noqa: E402
from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.verify import random_inputs, with_random_weights  # noqa: E402
from fuseplan.runtime import interleaved_latency, session  # noqa: E402


@pytest.fixture(scope="module")
def squeezenet():
    path, label = model_path("squeezenet")
    return with_random_weights(prepare_model(read_model(path), label)[0], seed=0)


def test_a_session_runs_on_the_cpu_with_the_threads_and_optimisation_level_asked(squeezenet, tmp_path):
    for level, expected in (("disabled", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                            ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        made = session(squeezenet, 2, level)
        options = made.get_session_options()
        assert options.graph_optimization_level == expected
        assert (options.intra_op_num_threads, options.inter_op_num_threads, options.log_severity_level) == (2, 1, 3)
        assert made.get_providers() == ["CPUExecutionProvider"]
    path = tmp_path / "squeezenet.onnx"
    path.write_bytes(squeezenet.SerializeToString())
    outputs = [session(source, 1, "disabled").run(None, random_inputs(squeezenet, 0))[0]
               for source in (squeezenet, path, str(path), path.read_bytes())]
    assert all((out == outputs[0]).all() for out in outputs[1:])  # a proto, a path, its text and bytes alike


def test_an_unknown_level_or_a_model_onnxruntime_cannot_load_is_one_clear_error(squeezenet):
    with pytest.raises(FuseplanError, match="unknown optimisation level 'some'; choose one of all, disabled"):
        session(squeezenet, 1, "some")
    with pytest.raises(FuseplanError, match="^onnxruntime cannot run the model: "):
        session(b"not a model", 1)


def test_interleaved_rounds_give_each_session_its_median_seconds(squeezenet):
    sessions = {"disabled": session(squeezenet, 1, "disabled"), "all": session(squeezenet, 1, "all")}
    runs = {key: 0 for key in sessions}

    class Counted:
        def __init__(self, key):
            self.key = key

        def run(self, names, feeds):
            runs[self.key] += 1
            return sessions[self.key].run(names, feeds)

    medians = interleaved_latency({key: Counted(key) for key in sessions}, random_inputs(squeezenet, 0),
                                  warmup=1, rounds=3)
    assert set(medians) == set(sessions) and all(seconds > 0 for seconds in medians.values())
    assert runs == {"disabled": 4, "all": 4}  # one warm-up and one run a round each
