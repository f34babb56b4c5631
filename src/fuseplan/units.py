"""Parsing of human-written byte sizes such as ``128KB`` or ``0.5MiB``."""

from __future__ import annotations

import re
from decimal import Decimal, localcontext

from fuseplan.errors import FuseplanError, shown

# Buffer sizes follow the accelerator convention of the reference paper:
# "KB" means 1024 bytes, so 128KB == 131072 bytes. The IEC spellings are
# accepted as synonyms.
KB = 1024
MB = 1024**2  # every figure, table and picture divides by these, never by powers of ten

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1024**3,
    "GIB": 1024**3,
}

_SIZE = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*([A-Za-z]*)\s*$")

MAX_SIZE = 1024**4  # 1 TiB: far beyond any on-chip buffer, small enough for exact integer arithmetic everywhere
_MAX_DIGITS = 40  # characters of a size's number (its sign and point included); far more than 1 TiB needs


def parse_size(text: str | int) -> int:
    """Return the number of bytes that ``text`` denotes, computed exactly (no floating point).

    >>> parse_size("128KB"), parse_size("0.5MiB"), parse_size("131072")
    (131072, 524288, 131072)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = Decimal(text), ""
    else:
        match = _SIZE.match(str(text))
        if match is not None and match.group(2).upper() in _UNITS and len(match.group(1)) > _MAX_DIGITS:
            raise FuseplanError(f"size {shown(text)} has more than the {_MAX_DIGITS} digits a size may have; the "
                                "largest buffer fuseplan accepts is 1 TiB")
        if match is None or match.group(2).upper() not in _UNITS:
            raise FuseplanError(
                f"cannot read size {shown(text)}: expected a number with an optional unit "
                "(B, KB, KiB, MB, MiB, GB), for example 256KB, 0.5MiB or 131072"
            )
        value, unit = Decimal(match.group(1)), match.group(2).upper()
    with localcontext() as context:
        context.prec = 100  # exact: the number has at most _MAX_DIGITS digits and the unit at most 10
        size = value * _UNITS[unit]
    if size < 1 or size != size.to_integral_value():
        raise FuseplanError(f"size {shown(text)} must be a positive whole number of bytes")
    if size > MAX_SIZE:
        raise FuseplanError(f"size {shown(text)} is more than the largest buffer fuseplan accepts, 1 TiB")
    return int(size)


def format_bytes(n: float) -> str:
    """Format a byte count with the same 1024-based units :func:`parse_size` reads."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"
