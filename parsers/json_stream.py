"""Streaming the elements of one big JSON array, a slice of text at a time, with a typed msgspec decoder.

Trace files are one huge array of small objects (Kineto's ``traceEvents``, Ascend's ``trace_view.json``). Decoding
the whole file at once holds the text and every decoded object together. Here the text is read in blocks (plain
or gzip), cut after an element's closing ``}``, and each slice is decoded on its own, so memory holds one slice
and what the caller keeps from it.

Why a cut is safe: the slice ``[`` + text + ``]`` is decoded by a full JSON parser; a cut inside a string leaves
it unterminated and a cut inside a nested object leaves a brace open, so only a cut between two elements of the
array decodes. A slice that does not decode is cut earlier (and, if none fits, the window grows).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import msgspec

from paradiag.parsers.base import TraceError

BLOCK = 4 * 1024 * 1024  # bytes read at a time
SLICE = 1024 * 1024  # bytes of elements decoded at a time
WHITESPACE = b" \t\r\n"
GZIP_MAGIC = b"\x1f\x8b"


def open_text(path: Path, shown: Path | str) -> BinaryIO:
    """A binary reader of the file's text, decompressing gzip on the fly (ISA-L when available)."""
    with open(path, "rb") as f:
        head = f.read(2)
    if not head:
        raise TraceError(shown, "the file is empty")
    if head != GZIP_MAGIC:
        return open(path, "rb")
    try:
        from isal import igzip

        return cast(BinaryIO, igzip.open(path, "rb"))
    except ImportError:  # pragma: no cover - isal is a dependency
        return cast(BinaryIO, gzip.open(path, "rb"))


class ArrayStream:
    """Iterate over decoded slices of the array at ``key`` (or of the top-level array when ``key`` is None).

    After iteration, ``rest`` holds the document's text with that array emptied (for the small metadata)."""

    def __init__(
        self,
        reader: IO[bytes],
        shown: Path | str,
        key: bytes | None,
        decoder: msgspec.json.Decoder[Any],
        loose: msgspec.json.Decoder[Any] | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        self.reader = reader
        self.shown = shown
        self.key = key
        self.decoder = decoder
        self.loose = loose
        self.warnings = warnings if warnings is not None else []
        self.buf = bytearray()
        self.eof = False
        self.consumed = 0  # bytes dropped from the front of buf so far (for error positions)
        self.prefix = b""
        self.rest = b""

    def _fill(self, size: int) -> None:
        while len(self.buf) < size and not self.eof:
            try:
                block = self.reader.read(BLOCK)
            except (EOFError, OSError, zlib.error) as exc:
                raise TraceError(self.shown, f"truncated or corrupt gzip data ({exc})") from exc
            if not block:
                self.eof = True
            else:
                self.buf += block

    def _skip_ws(self, pos: int) -> int:
        while True:
            self._fill(pos + 1)
            if pos >= len(self.buf) or self.buf[pos] not in WHITESPACE:
                return pos
            pos += 1

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
                raise TraceError(self.shown, f"invalid JSON: the text ends inside the array (byte {self.consumed + pos})")
            if self.buf[pos] == ord("]"):
                self._finish(pos + 1)
                return
            items, pos = self._next_slice(pos)
            yield items
            if pos >= BLOCK:  # drop what was decoded, a few slices at a time (each drop moves the rest)
                del self.buf[:pos]
                self.consumed += pos
                pos = 0

    def _next_slice(self, pos: int) -> tuple[Any, int]:
        """Decode the longest run of whole elements from ``pos`` within the window; index after its separator."""
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
            window *= 4

    def _decode(self, lo: int, hi: int) -> Any:
        """The elements in buf[lo:hi], or None when that is not a run of whole elements."""
        with memoryview(self.buf) as view:
            text = b"".join((b"[", view[lo:hi], b"]"))
        try:
            return self.decoder.decode(text)
        except msgspec.ValidationError as exc:
            if self.loose is None:
                raise TraceError(self.shown, f"unexpected value in the array near byte {self.consumed + lo} ({exc})") from exc
            error = exc
        except msgspec.DecodeError:
            return None
        try:
            items = self.loose.decode(text)  # the cut is good if the lenient decoder reads it
        except msgspec.ValidationError as exc:
            raise TraceError(self.shown, f"an element of the array is not what was expected near byte {self.consumed + lo} ({exc})") from exc
        except msgspec.DecodeError:
            return None
        self.warnings.append(f"unexpected value types near byte {self.consumed + lo} ({error}); read leniently")
        return items

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
