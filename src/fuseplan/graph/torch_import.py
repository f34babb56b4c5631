"""PyTorch in: export an ``nn.Module`` to ONNX with torch's exporter and read it as a :class:`CompGraph`.

Needs the ``torch`` extra (torch and onnxscript, which torch's ``torch.export``-based
exporter uses). Nothing else in fuseplan imports torch.

* :func:`export_torch` gives the ONNX model (weights inside, or in an external
  data file with :func:`save_torch_onnx`);
* :func:`graph_from_torch` returns the graph ready to plan;
* :func:`export_factory` runs ``path/to/module.py:factory`` (the command line's
  ``MODEL`` form): ``factory()`` returns ``(module, example_inputs)``;
  :func:`exported_factory` keeps its export in a cache keyed by the file's
  content, the factory's name and the content of the local modules the file
  imports, so only the first command pays for torch's exporter.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
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
    child's stdout, which the parent passes on to its stderr, apart from the exporter's own logging).

    The factory file's directory comes first on ``sys.path``, as ``python module.py`` has it, so the file
    may import modules beside it; the local modules it loaded are listed with their content's digest in
    ``directory/sources.json`` (:func:`local_sources`), which the export cache keys by.
    """
    factory_file = Path(FACTORY_PATTERN.match(spec)["file"]).resolve()
    sys.path.insert(0, str(factory_file.parent))
    module, inputs, name = load_factory(spec, prints=sys.stdout)
    sources = local_sources(factory_file)
    weight_bytes = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    written = save_torch_onnx(module, inputs, Path(directory) / f"{name}.onnx",
                              external_data=weight_bytes > EXTERNAL_DATA_ABOVE)
    from fuseplan.files import write_text

    write_text(Path(directory) / SOURCES_FILE, json.dumps({"sources": sources}, indent=1))
    return written


#: The file of an export's directory that lists the local modules its factory loaded, with their digests.
SOURCES_FILE = "sources.json"


def local_sources(factory_file: Path) -> dict[str, str]:
    """``{path relative to the factory file's directory: sha256 of its content}`` of every module now
    loaded in this process whose file lies under that directory, the factory file itself and the
    installed packages (the interpreter's prefixes, site-packages, fuseplan itself) apart."""
    import site
    import sysconfig

    home = factory_file.parent
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                             *site.getsitepackages(), site.getusersitepackages(),
                                             *sysconfig.get_paths().values())}
    installed.add(Path(__file__).resolve().parents[1])  # fuseplan's own package: the exporter, not the model
    found: dict[str, str] = {}
    for loaded in list(sys.modules.values()):
        name = getattr(loaded, "__file__", None)
        if not isinstance(name, str):
            continue
        path = Path(name).resolve()
        if path == factory_file or not path.is_file() or not path.is_relative_to(home):
            continue
        if any(path.is_relative_to(prefix) for prefix in installed if prefix != home and
               not home.is_relative_to(prefix)) or "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        found[path.relative_to(home).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return dict(sorted(found.items()))


#: Where exports of ``module.py:factory`` are kept between commands; the environment variable overrides it.
EXPORT_CACHE_ENV = "FUSEPLAN_TORCH_CACHE"


def default_export_cache() -> Path:
    """``$FUSEPLAN_TORCH_CACHE``, else ``~/.cache/fuseplan/torch-exports`` (beside the latency cache)."""
    given = os.environ.get(EXPORT_CACHE_ENV)
    return Path(given) if given else Path.home() / ".cache" / "fuseplan" / "torch-exports"


def _file_key(spec: str) -> str:
    """What every export of ``spec`` depends on: the factory file's content, the factory's name and the
    torch and onnxscript versions (the local modules the file imports come on top, :func:`export_key`)."""
    match = FACTORY_PATTERN.match(spec)
    if match is None:
        raise FuseplanError(f"{spec!r} is not of the form path/to/module.py:factory")
    path = Path(match["file"])
    if not path.is_file():
        raise FuseplanError(f"{path}: no such Python file")
    from fuseplan.files import read_input

    digest = hashlib.sha256(read_input(path, "Python file"))
    for part in ("sources v2", match["factory"], _package_version("torch"), _package_version("onnxscript")):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:32]


def _sources_key(file_key: str, sources: dict[str, str]) -> str:
    digest = hashlib.sha256(file_key.encode())
    for relative, content in sorted(sources.items()):
        digest.update(b"\0" + relative.encode() + b"\0" + content.encode())
    return digest.hexdigest()[:32]


def _manifest(root: Path, file_key: str) -> Path:
    """Where the cache notes which local modules the latest export of a factory file loaded."""
    return root / f"{file_key}.sources.json"


def _current_sources(spec: str, names: list[str]) -> dict[str, str]:
    """The digests of the files ``names`` (relative to the factory file's directory) as they are now; a
    missing or unreadable file digests as ``absent``, which no export recorded."""
    home = Path(FACTORY_PATTERN.match(spec)["file"]).resolve().parent
    found = {}
    for relative in names:
        try:
            found[relative] = hashlib.sha256((home / relative).read_bytes()).hexdigest()
        except OSError:
            found[relative] = "absent"
    return found


def export_key(spec: str, cache: Path | None = None) -> str:
    """The cache key of ``spec``'s export: the factory file's content, the factory's name, the torch and
    onnxscript versions, and the content of the local modules (files under the factory file's directory)
    that the latest export of this file loaded, as noted in ``cache``.

    Which local modules a file loads is known only once it has run, so the cache keeps, per file key,
    the list its latest export found: an edit to one of them changes the key, and the next command
    exports again (and records the list afresh, should the edit import other modules).
    """
    root = Path(cache) if cache is not None else default_export_cache()
    return _recorded_key(spec, root, _file_key(spec))


def _recorded_key(spec: str, root: Path, file_key: str) -> str:
    try:
        names = json.loads(_manifest(root, file_key).read_text("utf-8"))["sources"]
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise TypeError("not a list of file names")
    except (OSError, ValueError, KeyError, TypeError):
        names = []  # no export yet (or a damaged note): the key of a file that imports nothing local
    return _sources_key(file_key, _current_sources(spec, names))


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def exported_factory(spec: str, cache: Path | None = None) -> Path:
    """The ONNX file of ``spec``, exported once and kept in ``cache`` (default :func:`default_export_cache`)
    under :func:`export_key`, so later commands on the same file, factory and local modules skip torch's
    exporter.

    Each export is written into a staging directory of its own and renamed into place whole, so a reader
    never sees half an export; of writers exporting the same key at once the first to rename keeps its
    export. The key it is renamed to comes from the factory file as read before the export and the local
    modules as the export's process read them once the factory had returned (``sources.json``), not
    after torch's exporter ran, so an edit made meanwhile is not filed under the edited content.
    """
    import shutil
    import tempfile

    from fuseplan.files import settle_directory, write_text

    root = Path(cache) if cache is not None else default_export_cache()
    file_key = _file_key(spec)  # the file as it is before the export starts
    key = _recorded_key(spec, root, file_key)
    factory = FACTORY_PATTERN.match(spec)["factory"]
    final = root / key / f"{factory}.onnx"
    if final.is_file():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=root))
    except OSError as exc:
        raise FuseplanError(f"cannot create the export cache {root}: {exc.strerror}") from None
    try:
        export_factory(spec, staging)
        sources = json.loads((staging / SOURCES_FILE).read_text("utf-8"))["sources"]
        key = _sources_key(file_key, sources)
        final = root / key / f"{factory}.onnx"
        settle_directory(staging)
        try:
            os.rename(staging, root / key)
        except OSError:
            if not final.is_file():  # not another writer's export that got there first
                raise FuseplanError(f"cannot keep the export in {root / key}") from None
        write_text(_manifest(root, file_key), json.dumps({"sources": sorted(sources)}))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
