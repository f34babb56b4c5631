"""The hardware file schema (pydantic) and the readers of files and templates."""

from __future__ import annotations

import importlib
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from fuseplan.errors import FuseplanError, shown
from fuseplan.hardware import MAX_BYTES_PER_ELEMENT, TEMPLATE_SUFFIX, template_names
from fuseplan.units import parse_size

try:  # pydantic and pyyaml are core dependencies; the guard only turns a broken install into one line
    importlib.import_module("yaml")  # read through fuseplan.documents
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise FuseplanError(f"hardware files need pydantic and pyyaml ({exc}); reinstall fuseplan") from None

DEFAULT_BUFFER = "256KB"
DEFAULT_BYTES_PER_ELEMENT = 1
FIGURE_RANGE = (1e-6, 1e24)
# Hardware files hold a dozen keys; sweep configurations have the same cap.
MAX_HARDWARE_BYTES = 1 << 20


class Hardware(BaseModel):
    """One accelerator. Every figure but the buffer and the data width is optional."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: Optional[str] = Field(None, description="A label for reports.")
    source: Optional[str] = Field(None, description="Where the figures come from.")
    buffer: Optional[int] = Field(None, description="On-chip buffer, as --buffer reads it: 108KB, 0.5MiB, 131072.")
    bytes_per_element: Optional[int] = Field(None, ge=1, le=MAX_BYTES_PER_ELEMENT,
                                             description="Data width in bytes (1 = int8).")
    dram_bytes_per_second: Optional[float] = Field(None, gt=0, description="DRAM bandwidth.")
    buffer_bytes_per_second: Optional[float] = Field(None, gt=0, description="On-chip buffer bandwidth.")
    peak_macs_per_second: Optional[float] = Field(None, gt=0, description="Peak multiply-accumulate throughput.")
    dram_pj_per_byte: Optional[float] = Field(None, ge=0, description="Energy per byte moved to or from DRAM.")
    buffer_pj_per_byte: Optional[float] = Field(None, ge=0, description="Energy per byte read from or written to "
                                                                          "the buffer.")
    mac_pj: Optional[float] = Field(None, ge=0, description="Energy per multiply-accumulate.")

    @field_validator("dram_bytes_per_second", "buffer_bytes_per_second", "peak_macs_per_second", "dram_pj_per_byte",
                     "buffer_pj_per_byte", "mac_pj")
    @classmethod
    def _in_range(cls, value: Optional[float]) -> Optional[float]:
        # Estimates multiply figures by byte and MAC counts (up to about 1e15) and divide by rates: figures
        # inside these bounds keep every estimate a finite number, and no real accelerator lies outside them.
        if value is not None and value != 0 and not FIGURE_RANGE[0] <= value <= FIGURE_RANGE[1]:
            raise ValueError(f"{value!r} is outside the {FIGURE_RANGE[0]:g} to {FIGURE_RANGE[1]:g} a figure may be")
        return value

    @field_validator("buffer", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError("expected a size such as 256KB, 0.5MiB or 131072")
        try:
            return parse_size(value)
        except FuseplanError as exc:
            raise ValueError(str(exc)) from None

    # -- derived ----------------------------------------------------------
    @property
    def has_energy(self) -> bool:
        return any(v is not None for v in (self.dram_pj_per_byte, self.buffer_pj_per_byte, self.mac_pj))

    @property
    def has_roofline(self) -> bool:
        return any(v is not None for v in (self.dram_bytes_per_second, self.buffer_bytes_per_second,
                                           self.peak_macs_per_second))

    def with_overrides(self, buffer: str | int | None = None, bytes_per_element: int | None = None) -> Hardware:
        """This description with the command line's ``--buffer`` and ``--bytes-per-element`` (flags win)."""
        changes: dict[str, Any] = {}
        if buffer is not None:
            changes["buffer"] = parse_size(buffer)
        if bytes_per_element is not None:
            changes["bytes_per_element"] = int(bytes_per_element)
        return self.model_copy(update=changes) if changes else self

    @property
    def buffer_bytes(self) -> int:
        return self.buffer if self.buffer is not None else parse_size(DEFAULT_BUFFER)

    @property
    def element_bytes(self) -> int:
        return self.bytes_per_element if self.bytes_per_element is not None else DEFAULT_BYTES_PER_ELEMENT

    def record(self) -> dict[str, Any]:
        """The figures given (buffer and data width resolved), as plan.json's ``hardware`` object records them."""
        data = self.model_dump(exclude_none=True)
        data["buffer"], data["bytes_per_element"] = self.buffer_bytes, self.element_bytes
        return data


def _describe(error: ValidationError, origin: str) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(top level)"
    kind, message = first.get("type", ""), first.get("msg", "invalid value")
    if kind == "extra_forbidden":
        allowed = ", ".join(Hardware.model_fields)
        return f"{origin}: unknown key {shown(where)} (known keys: {allowed})"
    message = message.removeprefix("Value error, ")
    more = f" (and {len(error.errors()) - 1} more problem{'s' if len(error.errors()) > 2 else ''})" \
        if len(error.errors()) > 1 else ""
    return f"{origin}: key {where!r}: {message}{more}"


def parse_hardware(text: str, origin: str = "hardware file") -> Hardware:
    """A :class:`Hardware` from YAML text, or a :class:`FuseplanError` of one line naming the bad key."""
    from fuseplan.documents import loads_yaml

    data = loads_yaml(text, origin)
    if data is None:
        raise FuseplanError(f"{origin}: empty; a hardware file describes the accelerator in at least one key "
                            "(see docs/hardware.md)")
    if not isinstance(data, dict):
        raise FuseplanError(f"{origin}: expected a mapping of keys to values, got {type(data).__name__}")
    try:
        return Hardware.model_validate(data)
    except ValidationError as exc:
        raise FuseplanError(_describe(exc, origin)) from None


def load_hardware(spec: str | Path) -> Hardware:
    """The hardware in the YAML file ``spec``, or the shipped template of that name."""
    from fuseplan.files import read_input

    path = Path(spec)
    if not path.exists() and str(spec) in template_names():
        template = resources.files("fuseplan.hardware").joinpath("templates", f"{spec}{TEMPLATE_SUFFIX}")
        text = template.read_text("utf-8")
        return parse_hardware(text, f"hardware template {spec}")
    if not path.exists():
        raise FuseplanError(f"{shown(spec)} is neither a hardware file nor a template ({', '.join(template_names())})")
    try:
        text = read_input(path, "hardware file", MAX_HARDWARE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise FuseplanError(f"{path}: not a text (UTF-8) file") from None
    return parse_hardware(text, str(path))


def resolve_hardware(spec: str | Path | None, buffer: str | int | None,
                     bytes_per_element: int | None) -> Hardware:
    """What a command plans against: ``--hardware`` (if any) overridden by ``--buffer``/``--bytes-per-element``."""
    base = load_hardware(spec) if spec is not None else Hardware()
    return base.with_overrides(buffer, bytes_per_element)


