"""Streaming the elements of one big JSON array, a slice of text at a time, with a typed msgspec decoder.

Trace files are one huge array of small objects (Kineto's ``traceEvents``, Ascend's ``trace_view.json``). Decoding
the whole file at once holds the text and every decoded object together. Here the text is read in blocks (plain
or gzip), cut after an element's closing ``}``, and each slice is decoded on its own, so memory holds one slice
and what the caller keeps from it.

Why a cut is safe: the slice ``[`` + text + ``]`` is decoded by a full JSON parser; a cut inside a string leaves
it unterminated and a cut inside a nested object leaves a brace open, so only a cut between two elements of the
array decodes. A slice that does not decode is cut earlier (and, if none fits, the window grows).

Limits, checked while streaming so that a small gzip bomb stops early (documented in docs/schema.md):
``PARADIAG_MAX_FILE_MB`` bounds the decompressed bytes read from one file (default: no bound) and
``PARADIAG_MAX_STRING_KB`` the longest name a parser accepts (default 64 KiB); one element of the array may be
at most :func:`max_element_bytes` long.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import msgspec
import pyarrow.compute as pc
from isal import igzip
from isal.isal_zlib import error as IsalError

from paradiag.parsers.base import TraceError

BLOCK = (
    1024 * 1024
)  # bytes read at a time (a bigger block only holds more text at once: 4 MB cost 14 MB more per rank)
SLICE = 1024 * 1024  # bytes of elements decoded at a time
_NOT_WHITESPACE = re.compile(rb"[^ \t\r\n]")
MAX_MISSES = 4  # slices the first of several decoders may fail on before the next one is tried first
GZIP_MAGIC = b"\x1f\x8b"
MAX_FILE_MB = "PARADIAG_MAX_FILE_MB"
MAX_STRING_KB = "PARADIAG_MAX_STRING_KB"
DEFAULT_MAX_STRING_KB = 64

# ISA-L raises its own error for corrupt data (its stubs do not say it is an exception).
GZIP_ERRORS: tuple[type[BaseException], ...] = (
    EOFError,
    OSError,
    zlib.error,
    cast(type[BaseException], IsalError),
)


class LimitError(TraceError):
    """A file over one of the limits (``PARADIAG_MAX_FILE_MB``, ``PARADIAG_MAX_STRING_KB``)."""


def _env_limit(name: str, default: int | None) -> int | None:
    """A positive integer limit from the environment; 0 means none."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"${name}", f"${name} is not a whole number ({text!r})") from None
    return value if value > 0 else None


def max_file_bytes() -> int | None:
    """Decompressed bytes one trace file may hold (``PARADIAG_MAX_FILE_MB``; unset or 0: no limit)."""
    mb = _env_limit(MAX_FILE_MB, None)
    return None if mb is None else mb * 1024 * 1024


def max_string_bytes() -> int | None:
    """Bytes the longest accepted name may hold (``PARADIAG_MAX_STRING_KB``, default 64 KiB; 0: no limit)."""
    kb = _env_limit(MAX_STRING_KB, DEFAULT_MAX_STRING_KB)
    return None if kb is None else kb * 1024


def max_element_bytes() -> int | None:
    """The longest one element of a streamed array may be: room for a few long strings and many arguments."""
    strings = max_string_bytes()
    return None if strings is None else max(16 * SLICE, 4 * strings)


def check_names(names: Any, shown: Path | str, what: str = "event name") -> None:
    """TraceError when a name in the Arrow string array ``names`` is longer than the string limit."""
    limit = max_string_bytes()
    if limit is None or len(names) == 0:
        return
    longest = pc.max(pc.binary_length(names)).as_py()
    if longest is not None and longest > limit:
        raise LimitError(
            shown, f"{what} longer than {limit // 1024} KiB ({longest} bytes; limit {MAX_STRING_KB})"
        )


class _Limited:
    """A reader that stops with a TraceError once more than ``limit`` bytes were read (the decompressed size of
    a gzip file), and names corrupt gzip data."""

    def __init__(self, reader: IO[bytes], shown: Path | str, limit: int | None) -> None:
        self.reader, self.shown, self.limit, self.count = reader, shown, limit, 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.reader.read(size)
        except GZIP_ERRORS as exc:
            raise TraceError(self.shown, f"truncated or corrupt gzip data ({exc})") from exc
        self.count += len(data)
        if self.limit is not None and self.count > self.limit:
            raise LimitError(
                self.shown,
                f"decompressed size exceeds {self.limit // (1024 * 1024)} MB (limit {MAX_FILE_MB})",
            )
        return data

    def __enter__(self) -> _Limited:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()


def open_text(path: Path, shown: Path | str) -> BinaryIO:
    """A binary reader of the file's text, decompressing gzip on the fly (ISA-L), that stops at
    ``PARADIAG_MAX_FILE_MB`` decompressed bytes."""
    with open(path, "rb") as f:
        head = f.read(2)
    if not head:
        raise TraceError(shown, "the file is empty")
    limit = max_file_bytes()
    if head != GZIP_MAGIC:
        if limit is not None and path.stat().st_size > limit:
            raise LimitError(shown, f"size exceeds {limit // (1024 * 1024)} MB (limit {MAX_FILE_MB})")
        return open(path, "rb")
    return cast(BinaryIO, _Limited(igzip.open(path, "rb"), shown, limit))


def skipped_phases(phases: str) -> tuple[type, ...]:
    """Chrome-trace phases as Structs without fields, tagged by ``ph`` (each keeps its phase as the class attribute
    ``ph``): in a Union with the Structs of the phases a parser reads, the decoder skips these events' values
    unread. An unknown phase, or none, fails validation: the parser's general decoder reads that slice."""
    return tuple(
        msgspec.defstruct(f"Phase{ord(ph)}", [], tag_field="ph", tag=ph, gc=False, namespace={"ph": ph})
        for ph in phases
    )


class ArrayStream:
    """Iterate over decoded slices of the array at ``key`` (or of the top-level array when ``key`` is None).

    ``decoder`` may be several, tried in order on a slice whose values one does not accept (a fast one for the
    usual content first, no longer tried once it failed on a few slices); ``loose``, if given, after them, with
    a warning.
    After iteration, ``rest`` holds the document's text with that array emptied (for the small metadata)."""

    def __init__(
        self,
        reader: IO[bytes],
        shown: Path | str,
        key: bytes | None,
        decoder: msgspec.json.Decoder[Any] | tuple[msgspec.json.Decoder[Any], ...],
        loose: msgspec.json.Decoder[Any] | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        self.reader = reader
        self.shown = shown
        self.key = key
        self.decoders = decoder if isinstance(decoder, tuple) else (decoder,)
        self.misses = 0  # slices the first decoder did not accept
        self.loose = loose
        self.warnings = warnings if warnings is not None else []
        self.buf = bytearray()
        self.eof = False
        self.consumed = 0  # bytes dropped from the front of buf so far (for error positions)
        self.prefix = b""
        self.rest = b""
        self.max_element = max_element_bytes()

    def _fill(self, size: int) -> None:
        while len(self.buf) < size and not self.eof:
            try:
                block = self.reader.read(BLOCK)
            except GZIP_ERRORS as exc:
                raise TraceError(self.shown, f"truncated or corrupt gzip data ({exc})") from exc
            if not block:
                self.eof = True
            else:
                self.buf += block

    def _skip_ws(self, pos: int) -> int:
        """The index of the next non-whitespace byte (or the end). A regex search, not a loop per byte: a long
        run of whitespace (a few hundred KB of gzip) would otherwise cost minutes."""
        while True:
            self._fill(pos + 1)
            found = _NOT_WHITESPACE.search(self.buf, pos)
            if found is not None:
                return found.start()
            if self.eof:
                return len(self.buf)
            pos = len(self.buf)

    def _array_start(self) -> int:
        """Index just after the array's ``[``; ``prefix`` keeps the text before the key."""
        if self.key is None:
            pos = self._skip_ws(0)
            if pos >= len(self.buf) or self.buf[pos] != ord("["):
                raise TraceError(self.shown, "not a JSON array")
            self.prefix = b""
            return pos + 1
        needle = b'"' + self.key + b'"'
        start = 0
        while True:
            self._fill(start + BLOCK)
            found = self.buf.find(needle, start)
            if found >= 0:
                after = self._skip_ws(found + len(needle))
                if after < len(self.buf) and self.buf[after] == ord(":"):
                    bracket = self._skip_ws(after + 1)
                    if bracket < len(self.buf) and self.buf[bracket] == ord("["):
                        self.prefix = bytes(self.buf[:found])
                        return bracket + 1
                start = found + 1
                continue
            if self.eof:
                raise TraceError(self.shown, f"no '{self.key.decode()}' list")
            start = max(0, len(self.buf) - len(needle))

    def __iter__(self) -> Iterator[Any]:
        pos = self._array_start()
        while True:
            pos = self._skip_ws(pos)
            if pos >= len(self.buf):
                raise TraceError(
                    self.shown, f"invalid JSON: the text ends inside the array (byte {self.consumed + pos})"
                )
            if self.buf[pos] == ord("]"):
                self._finish(pos + 1)
                return
            items, pos = self._next_slice(pos)
            yield items
            if pos >= BLOCK:  # drop what was decoded, a few slices at a time (each drop moves the rest)
                del self.buf[: pos - 1]  # the byte before the next element stays: _decode puts its '[' there
                self.consumed += pos - 1
                pos = 1

    def _next_slice(self, pos: int) -> tuple[Any, int]:
        """Decode the longest run of whole elements from ``pos`` within the window; index after its separator."""
        if self.buf[pos] != ord("{"):
            raise TraceError(
                self.shown, f"an element of the array is not an object (near byte {self.consumed + pos})"
            )
        window = SLICE
        while True:
            self._fill(pos + window)
            hi = min(len(self.buf), pos + window)
            cut = self.buf.rfind(b"}", pos, hi)
            tries = 0
            while cut >= 0 and tries < 64:
                after = self._skip_ws(cut + 1)
                if after < len(self.buf) and self.buf[after] in b",]":
                    items = self._decode(pos, cut + 1)
                    if items is not None:
                        return items, after + 1 if self.buf[after] == ord(",") else after
                    tries += 1
                cut = self.buf.rfind(b"}", pos, cut)
            if self.eof and hi >= len(self.buf):
                raise TraceError(self.shown, f"invalid JSON in the array near byte {self.consumed + pos}")
            if self.max_element is not None and window >= self.max_element:
                raise LimitError(
                    self.shown,
                    f"an element of the array near byte {self.consumed + pos} is longer than {self.max_element // 1024} KiB"
                    f" (a string in it is over the {MAX_STRING_KB} limit, or it is not valid JSON)",
                )
            window *= 4

    def _decode(self, lo: int, hi: int) -> Any:
        """The elements in buf[lo:hi], or None when that is not a run of whole elements.

        The byte before the slice (the array's ``[``, a ``,`` or whitespace) and the one after it (``,``, ``]`` or
        whitespace) become ``[`` and ``]`` for the call. The slice is copied (a memcpy, a few per cent of the
        decode): values decoded as ``msgspec.Raw`` reference the text they came from, which must outlive ``buf``'s
        next refill."""
        before, after = self.buf[lo - 1], self.buf[hi]
        self.buf[lo - 1], self.buf[hi] = ord("["), ord("]")
        try:
            return self._decode_text(bytes(memoryview(self.buf)[lo - 1 : hi + 1]), lo)
        finally:
            self.buf[lo - 1], self.buf[hi] = before, after

    def _decode_text(self, text: bytes, lo: int) -> Any:
        for decoder in self.decoders:
            try:
                return decoder.decode(text)
            except RecursionError as exc:
                raise TraceError(
                    self.shown, f"values nested too deeply near byte {self.consumed + lo}"
                ) from exc
            except msgspec.ValidationError as exc:
                error = exc
                self._missed(decoder)
            except msgspec.DecodeError:
                return None
        if self.loose is None:
            raise TraceError(
                self.shown, f"unexpected value in the array near byte {self.consumed + lo} ({error})"
            ) from error
        try:
            items = self.loose.decode(text)  # the cut is good if the lenient decoder reads it
        except RecursionError as exc:
            raise TraceError(self.shown, f"values nested too deeply near byte {self.consumed + lo}") from exc
        except msgspec.ValidationError as exc:
            raise TraceError(
                self.shown,
                f"an element of the array is not what was expected near byte {self.consumed + lo} ({exc})",
            ) from exc
        except msgspec.DecodeError:
            return None
        self.warnings.append(
            f"unexpected value types near byte {self.consumed + lo} ({error}); read leniently"
        )
        return items

    def _missed(self, decoder: msgspec.json.Decoder[Any]) -> None:
        """The first of several decoders is a shortcut for the usual content: once it has failed on a few slices of
        this file, the next one decodes the rest directly instead of after it."""
        if decoder is self.decoders[0] and len(self.decoders) > 1:
            self.misses += 1
            if self.misses >= MAX_MISSES:
                self.decoders = self.decoders[1:]
                self.misses = 0

    def _finish(self, after: int) -> None:
        """Read what follows the array: the document minus the array is kept in ``rest``."""
        while not self.eof:
            self._fill(len(self.buf) + BLOCK)
        tail = bytes(self.buf[after:])
        self.buf = bytearray()
        if self.key is None:
            self.rest = b""
        else:
            self.rest = self.prefix + b'"' + self.key + b'": []' + tail
