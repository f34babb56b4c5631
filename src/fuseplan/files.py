"""Reading input files and writing output files safely.

Every stage reads and writes through this module, so the same rules hold
everywhere:

* an input must be a regular file of at most :data:`MAX_INPUT_BYTES`
  (a device such as ``/dev/zero``, a FIFO or a directory is refused before
  anything is read);
* every output path is checked before the long work starts
  (:func:`check_outputs`): its directory exists and is writable, it is not a
  directory, not the same file as any input (compared by device and inode,
  so hard links and symbolic links count) and not the same file as another
  output of the same command;
* every output is written atomically (:func:`atomic_path`): to a temporary
  file in the destination directory, flushed to disk, then renamed over the
  destination, so a reader sees the old file or the complete new one and an
  interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from fuseplan.documents import loads_json
from fuseplan.errors import FuseplanError, first_line

# ONNX's protobuf encoding cannot exceed 2 GiB; larger models keep their
# weights in external data files, which fuseplan never reads for planning.
MAX_INPUT_BYTES = 2 * 1024**3


def _describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input(path: str | Path, what: str = "file", limit: int = MAX_INPUT_BYTES) -> Path:
    """``path`` if it names a readable regular file of at most ``limit`` bytes; else a :class:`FuseplanError`."""
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise FuseplanError(f"{path}: no such file") from None
    except OSError as exc:
        raise FuseplanError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise FuseplanError(f"{path}: is {_describe(info.st_mode)}, not a regular file (expected the {what})")
    if info.st_size > limit:
        raise FuseplanError(f"{path}: {info.st_size} bytes is more than the {limit} bytes a {what} may have")
    if not os.access(path, os.R_OK):
        raise FuseplanError(f"{path}: cannot read the {what} (permission denied)")
    return path


def read_input(path: str | Path, what: str = "file", limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file, never more than ``limit`` (the file may grow after the check)."""
    path = check_input(path, what, limit)
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise FuseplanError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    if len(data) > limit:
        raise FuseplanError(f"{path}: more than the {limit} bytes a {what} may have")
    return data


def read_json(path: str | Path, what: str, limit: int = MAX_INPUT_BYTES) -> object:
    """The strict JSON document (:func:`fuseplan.documents.loads_json`) in the file at ``path``, read by
    :func:`read_input`; any problem is one :class:`FuseplanError` naming ``path`` and ``what`` it should be."""
    return loads_json(read_input(path, what, limit), str(path), what)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def check_output(path: str | Path, what: str = "output") -> Path:
    """``path`` if a file can be written there: refuse a directory, a missing or read-only parent."""
    path = Path(path)
    try:
        path.resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a loop of symbolic links
        raise FuseplanError(f"cannot write the {what} {path}: too many levels of symbolic links") from None
    if path.is_dir():
        raise FuseplanError(f"{path}: is a directory; give a file name for the {what}")
    if path.exists() and not path.is_file():
        raise FuseplanError(f"{path}: is {_describe(path.stat().st_mode)}; give a regular file for the {what}")
    parent = path.parent
    if not parent.is_dir():
        reason = "is not a directory" if parent.exists() else "does not exist"
        raise FuseplanError(f"cannot write the {what} {path}: directory {parent} {reason}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FuseplanError(f"cannot write the {what} {path}: directory {parent} is not writable")
    if path.exists() and not path.stat().st_mode & 0o222:
        # Replacing a file its owner made read-only would undo that choice (and root's access() says yes to
        # anything), so it is refused, as cp refuses without -f.
        raise FuseplanError(f"{path}: is read-only; make it writable or choose another path for the {what}")
    _probe_directory(path, what)
    return path


def _probe_directory(path: Path, what: str) -> None:
    """Create and remove a temporary file beside ``path``: what ``access()`` cannot tell (``/proc``, a read-only
    mount, a full disk) is found before the work, not when the output is written."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    except OSError as exc:
        raise FuseplanError(f"cannot write the {what} {path}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(name)


def check_output_dir(path: str | Path, what: str = "output directory") -> Path:
    """``path`` if a directory can be created (or filled) there: its nearest existing ancestor is a writable
    directory."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise FuseplanError(f"{path}: exists and is not a directory; choose a new {what}")
        if not os.access(path, os.W_OK | os.X_OK):
            raise FuseplanError(f"cannot write the {what} {path}: it is not writable")
        return path
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FuseplanError(f"cannot create the {what} {path}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise FuseplanError(f"cannot create the {what} {path}: directory {ancestor} is not writable")
    return path


def check_outputs(outputs: Iterable[tuple[str, str | Path | None]], inputs: Iterable[str | Path] = ()) -> None:
    """Check every output before work starts; ``outputs`` pairs a description (``"plan"``) with a path or ``None``.

    An output may not be the same file as an input or as another output:
    files are compared by (device, inode) when they exist, which catches hard
    links, symbolic links and different spellings of one path, and by
    resolved path otherwise (an input that does not exist yet is one the
    command creates, as ``passes --cache-dir``).
    """
    given = [(what, Path(path)) for what, path in outputs if path is not None]
    input_ids = {}
    for source in inputs:
        source = Path(source)
        identity = _identity(source)
        # an input the command creates (a cache directory) is known by its resolved path until it exists
        try:
            input_ids[identity if identity is not None else source.resolve()] = source
        except (OSError, RuntimeError):  # a symbolic link loop: no file is ever there to overwrite
            pass
    seen: dict[object, tuple[str, Path]] = {}
    for what, path in given:
        check_output(path, what)
        identity = _identity(path)
        key = identity if identity is not None else path.resolve()
        if key in input_ids:
            raise FuseplanError(f"refusing to overwrite the input {input_ids[key]} with the {what} {path}; "
                                "choose another output path")
        if key in seen:
            other_what, other = seen[key]
            raise FuseplanError(f"the {other_what} {other} and the {what} {path} are the same file; "
                                "give each output its own path")
        seen[key] = (what, path)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # some platforms and file systems cannot open directories; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    # os.umask can only be read by setting it, so it is set back at once.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _default_mode(directory: bool = False) -> int:
    # mkstemp and mkdtemp create entries for the owner only; outputs get the usual mode (0666 or 0777 less the umask).
    return (0o777 if directory else 0o666) & ~_umask()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; on success it replaces ``path`` in one rename.

    If the body raises (including ``KeyboardInterrupt``), the temporary file is
    removed and ``path`` is left as it was.
    """
    path = Path(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise FuseplanError(f"cannot write {path}: {exc.strerror}") from None
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(temporary, _default_mode())
        os.replace(temporary, path)
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS,
                                                      errno.EISDIR):
            raise FuseplanError(f"cannot write {path}: {exc.strerror}") from None
        raise
    _fsync_directory(path.parent)


@contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """An open binary file whose content atomically replaces ``path`` when the block ends without error."""
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        yield handle


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_file(path) as handle:
        handle.write(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


# -- ONNX ------------------------------------------------------------------
def _external_tensors(model) -> list:
    """Tensors of ``model``'s main graph (initializers and node attributes) whose data lies in another file."""
    from onnx.external_data_helper import uses_external_data

    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        for attribute in node.attribute:
            tensors.extend([attribute.t] if attribute.HasField("t") else [])
            tensors.extend(attribute.tensors)
    return [t for t in tensors if uses_external_data(t)]


def external_data_files(model, base_dir: str | Path) -> list[Path]:
    """The external weight files ``model`` (read from ``base_dir``) refers to."""
    from onnx.external_data_helper import ExternalDataInfo

    files = {Path(base_dir) / ExternalDataInfo(t).location for t in _external_tensors(model)}
    return sorted(files)


def external_data_output(model, base_dir: str | Path, path: str | Path) -> Path | None:
    """Where :func:`save_onnx` puts the weights of ``model`` when it writes it to ``path`` (``None``: nowhere)."""
    path = Path(path)
    if not _external_tensors(model) or _same_directory(path.parent, Path(base_dir)):
        return None
    return path.parent / f"{path.name}.data"


def _same_directory(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def save_onnx(model, path: str | Path, base_dir: str | Path) -> None:
    """Write ``model`` (read from ``base_dir`` without its external data) to ``path`` atomically.

    External weight locations are relative to the model file. Written into
    ``base_dir`` itself, the copy keeps pointing at the original weight files;
    written anywhere else, the weights are copied into one file beside it,
    ``<name>.data``, so the copy loads on its own.
    """
    import onnx

    path = Path(path)
    data_path = external_data_output(model, base_dir, path)
    if data_path is None:
        with atomic_file(path) as handle:
            handle.write(model.SerializeToString())
        return
    from onnx.external_data_helper import load_external_data_for_model

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    try:
        load_external_data_for_model(copy, str(base_dir))
    except Exception as exc:  # a missing, short or unsafe external data file
        reason = first_line(exc)
        raise FuseplanError(f"cannot copy the model's external weights from {base_dir}: {reason}") from None
    # onnx writes the weights next to the model file it saves: stage both in a private
    # directory beside the destination, then move the weights, then (the commit) the model.
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as staging:
        staged = Path(staging) / path.name
        onnx.save_model(copy, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data_path.name)
        for written in (Path(staging) / data_path.name, staged):
            if written.exists():
                with open(written, "rb+") as handle:
                    os.fsync(handle.fileno())
                os.chmod(written, _default_mode())
        if (Path(staging) / data_path.name).exists():
            os.replace(Path(staging) / data_path.name, data_path)
        os.replace(staged, path)
    _fsync_directory(path.parent)


def settle_directory(staging: Path) -> None:
    """Ready a filled staging directory for its rename into place: its files on disk, its mode that of a
    directory made under the umask (a temporary directory is made private)."""
    for child in staging.iterdir():
        with open(child, "rb+") as handle:
            os.fsync(handle.fileno())
    os.chmod(staging, _default_mode(directory=True))


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A temporary directory beside ``path`` to fill; on success it becomes ``path`` in one rename.

    ``path`` must not exist or be an empty directory. Missing parent
    directories are created. If the body raises, the temporary directory is
    removed and ``path`` is left as it was.
    """
    import shutil

    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FuseplanError(f"{path} exists and is not an empty directory; choose a new one")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise FuseplanError(f"cannot create {path}: {exc.strerror}") from None
    try:
        yield staging
        settle_directory(staging)
        os.replace(staging, path)  # rename(2) may replace an empty directory
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_directory(path.parent)
