"""Where a job's cache is: a local folder or a URL (paradiag.remote), behind one interface.

A :class:`Place` tells what cache it holds now (:meth:`Place.peek`, the manifest: for a URL one small read of
its pointer and manifest), opens it (:meth:`Place.open`), names the place of another profiling window's cache
(:meth:`Place.window`) and starts writing a new one (:meth:`Place.build`). The ingest writes every cache the
same way, into a temporary folder beside :attr:`Build.folder`, and the :class:`Build` commits it: a local cache
is the folder itself; a cache at a URL is a new generation there, whose files are uploaded and whose pointer is
written before the folder becomes its local mirror. Opening (paradiag.dataset) and the ingest (paradiag.ingest)
read no other difference between the two.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from paradiag import remote
from paradiag.cache import JobError, is_cache, window_cache, window_url
from paradiag.job import Job, read_cache


class Build(Protocol):
    """One ingest's new cache at a place, from its start to its commit or abandon."""

    @property
    def folder(self) -> Path:
        """The local folder the finished cache is moved into (a URL's: the local mirror of its generation)."""
        ...

    @property
    def upload(self) -> remote.Upload | None:
        """Where each parse uploads its rank's files as it finishes them (a URL), or None."""
        ...

    def commit(self, tmp: Path, uploaded: Iterable[str], pointer: dict[str, Any]) -> None:
        """Make the finished cache in ``tmp`` the place's (before it is moved into :attr:`folder`)."""
        ...

    def abandon(self) -> None:
        """After a failure: remove what was written elsewhere than ``tmp`` (best effort)."""
        ...

    def finish(self) -> Job:
        """The job, read from :attr:`folder` once the cache is there."""
        ...


class Place(Protocol):
    """A job's cache: a local folder or a URL."""

    @property
    def name(self) -> str:
        """The place as messages name it (a URL without its userinfo)."""
        ...

    def peek(self) -> dict[str, Any] | None:
        """The manifest of the cache here now, or None when there is none (or a broken one, built again)."""
        ...

    def open(self) -> Job:
        """The cache here, as it is (a JobError when there is none or it cannot be read)."""
        ...

    def window(self, index: int | None) -> Place:
        """The place of profiling window ``index``'s cache (None: the default, the latest window's)."""
        ...

    def build(self, source: Path) -> Build:
        """Start a new cache of the trace folder ``source`` here (a JobError now when it cannot be written)."""
        ...


@dataclass
class LocalBuild:
    folder: Path
    upload: remote.Upload | None = None

    def commit(self, tmp: Path, uploaded: Iterable[str], pointer: dict[str, Any]) -> None:
        """Nothing to do: moving the folder into place is the commit."""

    def abandon(self) -> None:
        """Nothing was written outside the temporary folder."""

    def finish(self) -> Job:
        return read_cache(self.folder)


@dataclass
class LocalPlace:
    """A cache folder on this machine."""

    path: Path
    _job: Job | None = field(default=None, repr=False)  # the cache read by peek, opened without a second read

    @property
    def name(self) -> str:
        return str(self.path)

    def peek(self) -> dict[str, Any] | None:
        if not is_cache(self.path):
            return None
        with contextlib.suppress(JobError):  # a broken cache is built again
            self._job = read_cache(self.path)
            return self._job.manifest
        return None

    def open(self) -> Job:
        job, self._job = self._job, None
        return job if job is not None else read_cache(self.path)

    def window(self, index: int | None) -> LocalPlace:
        return LocalPlace(window_cache(self.path, index))

    def build(self, source: Path) -> LocalBuild:
        here = self.path.resolve()
        if here == source or source in here.parents:
            raise JobError(
                f"{self.path}: the cache must not be inside the source folder (it is never modified)"
            )
        return LocalBuild(self.path)


@dataclass
class UrlBuild:
    writer: remote.Writer

    @property
    def folder(self) -> Path:
        return self.writer.mirror

    @property
    def upload(self) -> remote.Upload:
        return self.writer.upload

    def commit(self, tmp: Path, uploaded: Iterable[str], pointer: dict[str, Any]) -> None:
        self.writer.commit(tmp, uploaded, pointer)

    def abandon(self) -> None:
        self.writer.abandon()

    def finish(self) -> Job:
        self.writer.clean()
        return replace(read_cache(self.folder), url=self.writer.store.name)


@dataclass
class UrlPlace:
    """A cache at an fsspec URL: its committed generation, read through a local mirror (paradiag.remote)."""

    url: str
    _pointer: dict[str, Any] | None = field(default=None, repr=False)  # as peek read it

    @property
    def name(self) -> str:
        return remote.shown(self.url)

    def peek(self) -> dict[str, Any] | None:
        store = remote.connect(self.url)
        self._pointer = remote.read_pointer(store, required=False)
        return None if self._pointer is None else remote.read_manifest(store, self._pointer)

    def open(self) -> Job:
        store = remote.connect(self.url)
        pointer, self._pointer = self._pointer, None
        return replace(read_cache(remote.mirror(store, pointer)), url=store.name)

    def window(self, index: int | None) -> UrlPlace:
        return UrlPlace(window_url(self.url, index))

    def build(self, source: Path) -> UrlBuild:
        return UrlBuild(remote.Writer.start(self.url, source))


def place_of(location: str | os.PathLike[str] | Place) -> Place:
    """The place a command line or a caller names: a URL or a local folder (a place is itself)."""
    if not isinstance(location, str | os.PathLike):
        return location
    return UrlPlace(str(location)) if remote.is_url(location) else LocalPlace(Path(location))
