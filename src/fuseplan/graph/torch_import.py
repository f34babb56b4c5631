"""PyTorch in: export an ``nn.Module`` to ONNX with torch's exporter and read it as a :class:`CompGraph`.

Needs the ``torch`` extra (torch and onnxscript, which torch's ``torch.export``-based
exporter uses). Nothing else in fuseplan imports torch.

* :func:`export_torch` gives the ONNX model (weights inside, or in an external
  data file with :func:`save_torch_onnx`);
* :func:`graph_from_torch` returns the graph ready to plan;
* :func:`export_factory` runs ``path/to/module.py:factory`` (the command line's
  ``MODEL`` form): ``factory()`` returns ``(module, example_inputs)``;
  :func:`exported_factory` keeps its export in a cache keyed by the file's
  content and the factory's name, so only the first command pays for torch's
  exporter.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import logging
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from fuseplan.errors import FuseplanError, first_line

#: ``MODEL`` arguments of this form name a factory in a Python file.
FACTORY_PATTERN = re.compile(r"^(?P<file>.+\.py):(?P<factory>[A-Za-z_][A-Za-z0-9_]*)$")

_INSTALL = ("the PyTorch import needs the torch extra: run pip install -e '.[torch]' in the fuseplan checkout "
            "(on CPU-only machines install torch's CPU build first)")


def _torch():
    try:
        import torch
    except ImportError:
        raise FuseplanError(_INSTALL) from None
    return torch


def _as_tuple(example_inputs: Any) -> tuple:
    torch = _torch()
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    raise FuseplanError(f"example inputs must be a tensor or a tuple of tensors, not {type(example_inputs).__name__}")


def export_torch(module: Any, example_inputs: Any, *, input_names: Sequence[str] | None = None,
                 opset: int | None = None) -> onnx.ModelProto:
    """``module`` (in eval mode) exported with torch's ``torch.export``-based ONNX exporter, weights inside.

    The exporter's own optimisations run (constant folding, BatchNorm folded
    into the convolution before it). Any failure of the exporter (an
    operator it cannot trace, data-dependent control flow) is one
    :class:`FuseplanError` line naming the first reason.
    """
    program = _export_program(module, example_inputs, input_names, opset)
    return program.model_proto


def _export_program(module, example_inputs, input_names, opset):
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise FuseplanError(f"expected a torch.nn.Module, got {type(module).__name__}")
    try:
        importlib.import_module("onnxscript")  # the exporter imports it; a clear message beats its ImportError
    except ImportError:
        raise FuseplanError(_INSTALL.replace("torch extra", "torch extra (onnxscript)")) from None
    inputs = _as_tuple(example_inputs)
    was_training = module.training
    module.eval()
    options: dict[str, Any] = {"dynamo": True, "verbose": False}
    if input_names:
        options["input_names"] = list(input_names)
    if opset is not None:
        options["opset_version"] = opset
    # The exporter reports progress through warnings, logging and stdout; a planner's output stays its own.
    exporter_loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo",
                                                             "onnxscript")]
    levels = [logger.level for logger in exporter_loggers]
    try:
        for logger in exporter_loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            with torch.no_grad():
                return torch.onnx.export(module, inputs, **options)
    except FuseplanError:
        raise
    except Exception as exc:  # the exporter raises many types
        first = first_line(exc)
        raise FuseplanError(f"torch could not export {type(module).__name__} to ONNX: {first}") from None
    finally:
        for logger, level in zip(exporter_loggers, levels):
            logger.setLevel(level)
        module.train(was_training)


def save_torch_onnx(module: Any, example_inputs: Any, path: str | Path, *, external_data: bool = False,
                    input_names: Sequence[str] | None = None, opset: int | None = None) -> Path:
    """Export ``module`` to the ONNX file ``path``; with ``external_data`` the weights go to ``<name>.data``
    beside it (how models above the 2 GB protobuf limit must be stored)."""
    from fuseplan.files import atomic_file

    path = Path(path)
    program = _export_program(module, example_inputs, input_names, opset)
    if external_data:
        program.save(str(path), external_data=True)
    else:
        with atomic_file(path) as handle:
            handle.write(program.model_proto.SerializeToString())
    return path


def load_factory(spec: str, prints: Any = None) -> tuple[Any, tuple, str]:
    """Run the factory of ``path/to/module.py:factory``: ``(module, example_inputs, factory name)``; what the
    module prints goes to ``prints`` (default: stderr, as stdout may carry a command's JSON)."""
    match = FACTORY_PATTERN.match(spec)
    if match is None:
        raise FuseplanError(f"{spec!r} is not of the form path/to/module.py:factory")
    path, factory_name = Path(match["file"]), match["factory"]
    if not path.is_file():
        raise FuseplanError(f"{path}: no such Python file")
    torch = _torch()
    module_name = f"_fuseplan_factory_{abs(hash(str(path.resolve())))}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    if loader is None or loader.loader is None:
        raise FuseplanError(f"{path}: cannot be loaded as a Python module")
    source = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = source
    try:
        with contextlib.redirect_stdout(prints or sys.stderr):
            loader.loader.exec_module(source)
            factory = getattr(source, factory_name, None)
            if not callable(factory):
                raise FuseplanError(f"{path} defines no function {factory_name!r}")
            built = factory()
    except (FuseplanError, KeyboardInterrupt):
        raise
    except SystemExit as exc:  # sys.exit() in the user's code must not end the command silently, or with its status
        raise FuseplanError(f"{spec}: the module called sys.exit({exc.code!r}) instead of returning "
                            "(module, example_inputs)") from None
    except BaseException as exc:  # the user's code: any exception, even GeneratorExit or a BaseException
        first = first_line(exc) if str(exc).strip() else ""
        raise FuseplanError(f"{spec}: {type(exc).__name__}{': ' + first if first else ''}") from None
    finally:
        sys.modules.pop(module_name, None)
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], torch.nn.Module)):
        raise FuseplanError(f"{spec}: the factory must return (module, example_inputs), a torch.nn.Module and "
                            "a tensor or tuple of tensors")
    return built[0], _as_tuple(built[1]), factory_name


#: Weights above this many bytes go to an external data file (protobuf refuses messages over 2 GB).
EXTERNAL_DATA_ABOVE = 1024**3


def export_factory(spec: str, directory: str | Path) -> Path:
    """Export the model built by ``path/to/module.py:factory`` to ``directory/<factory>.onnx``, its weights
    inside, or in ``<factory>.onnx.data`` beside it when they pass :data:`EXTERNAL_DATA_ABOVE` bytes.

    The user's module runs in a child Python process: whatever it does (``os._exit``, a crash, printing,
    torch's exporter logging dozens of lines) cannot end or clutter this command. What the module prints
    is passed on to stderr; a failure is one :class:`FuseplanError` line.
    """
    import subprocess

    directory = Path(directory)
    error_file = directory / ".error"
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    child = subprocess.run([sys.executable, "-c", _CHILD, spec, str(directory), str(error_file)], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    if child.stdout:
        sys.stderr.write(child.stdout)
    if error_file.is_file():
        message = error_file.read_text("utf-8", errors="replace").strip()
        error_file.unlink()
        raise FuseplanError(message)
    written = directory / f"{FACTORY_PATTERN.match(spec)['factory']}.onnx"
    if child.returncode != 0 or not written.is_file():
        last = next((line.strip() for line in reversed(child.stderr.splitlines()) if line.strip()), "")
        raise FuseplanError(f"{spec}: the export ended (status {child.returncode}) without a model"
                            f"{'; ' + last if last else ''} (does the module call os._exit?)")
    return written


# The child process of export_factory: the export, and any FuseplanError written to a file for the parent.
_CHILD = """
import sys
from pathlib import Path
from fuseplan.errors import FuseplanError
from fuseplan.graph.torch_import import export_here
try:
    export_here(sys.argv[1], sys.argv[2])
except FuseplanError as exc:
    Path(sys.argv[3]).write_text(str(exc), encoding="utf-8")
    sys.exit(2)
"""


def export_here(spec: str, directory: str | Path) -> Path:
    """:func:`export_factory` in this process (the child's part of it: what the module prints goes to the
    child's stdout, which the parent passes on to its stderr, apart from the exporter's own logging)."""
    module, inputs, name = load_factory(spec, prints=sys.stdout)
    weight_bytes = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    return save_torch_onnx(module, inputs, Path(directory) / f"{name}.onnx",
                           external_data=weight_bytes > EXTERNAL_DATA_ABOVE)


#: Where exports of ``module.py:factory`` are kept between commands; the environment variable overrides it.
EXPORT_CACHE_ENV = "FUSEPLAN_TORCH_CACHE"


def default_export_cache() -> Path:
    """``$FUSEPLAN_TORCH_CACHE``, else ``~/.cache/fuseplan/torch-exports`` (beside the latency cache)."""
    given = os.environ.get(EXPORT_CACHE_ENV)
    return Path(given) if given else Path.home() / ".cache" / "fuseplan" / "torch-exports"


def export_key(spec: str) -> str:
    """What an export of ``spec`` depends on: the file's content, the factory's name and torch's version.

    (Modules the file imports are not hashed: edit the factory's own file, or clear the cache, after
    changing them.)
    """
    match = FACTORY_PATTERN.match(spec)
    if match is None:
        raise FuseplanError(f"{spec!r} is not of the form path/to/module.py:factory")
    path = Path(match["file"])
    if not path.is_file():
        raise FuseplanError(f"{path}: no such Python file")
    from fuseplan.files import read_input

    digest = hashlib.sha256(read_input(path, "Python file"))
    for part in (match["factory"], _package_version("torch"), _package_version("onnxscript")):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:32]


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def exported_factory(spec: str, cache: Path | None = None) -> Path:
    """The ONNX file of ``spec``, exported once and kept in ``cache`` (default :func:`default_export_cache`)
    under :func:`export_key`, so later commands on the same file and factory skip torch's exporter.

    Each export is written into a directory of its own and renamed into place whole
    (:func:`~fuseplan.files.atomic_directory`), so a reader never sees half an export, and of writers
    exporting the same key at once the first to rename keeps its export.
    """
    from fuseplan.files import atomic_directory

    root = Path(cache) if cache is not None else default_export_cache()
    key = export_key(spec)
    final = root / key / f"{FACTORY_PATTERN.match(spec)['factory']}.onnx"
    if final.is_file():
        return final
    try:
        with atomic_directory(root / key) as staging:
            export_factory(spec, staging)
    except (OSError, FuseplanError):
        if not final.is_file():  # not another writer's export that got there first
            raise
    return final
