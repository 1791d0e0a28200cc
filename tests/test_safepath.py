"""paradiag.safepath: whatever name a client, an archive or a manifest gives, the file lands inside its folder or
the name is refused. A corpus of hostile spellings, a property over any text, and links planted on the way."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paradiag import safepath
from paradiag.safepath import UnsafeName

# name -> where it lands (relative), or None: refused
CORPUS: dict[str, str | None] = {
    "rank0.json": "rank0.json",
    "job/rank0.json": "job/rank0.json",
    "/tmp/x": "tmp/x",
    "//tmp/x": "tmp/x",  # POSIX keeps a leading // as a root: Path("//tmp") / ... stays outside
    "///tmp/x": "tmp/x",
    "\\tmp\\x": "tmp/x",
    "\\\\tmp\\x": "tmp/x",
    "\\\\server\\share\\x": "server/share/x",  # UNC
    "//server/share/x": "server/share/x",
    "\\\\?\\C:\\Windows\\x": "Windows/x",  # device namespace, then a drive
    "\\\\.\\C:\\x": "x",
    "//?/C:/x": "x",
    "C:\\x": "x",
    "C:/x": "x",
    "C:x": "x",  # drive-relative
    "C:": None,
    "c:\\": None,
    "job\\sub/rank0.json": "job/sub/rank0.json",  # mixed separators
    "./a/./b": "a/b",
    "a//b": "a/b",
    "..": None,
    "../x": None,
    "a/../../x": None,
    "a/..": None,
    "a\\..\\..\\x": None,
    "/..": None,
    "//..//x": None,
    "...": None,
    ".. ": None,  # Windows drops trailing spaces and dots: it would be ..
    "a/.. /x": None,
    "a/ ../x": None,  # only dots and spaces: refused whatever a file system makes of it
    "./../x": None,
    "\uff0e\uff0e/x": None,  # full-width dots: NFKC folds them to ..
    "a\uff0fb": None,  # a full-width solidus: a separator once folded
    "\u2024\u2024/x": None,  # one-dot leaders: NFKC ".."
    "\u2025/x": None,  # a two-dot leader: NFKC ".."
    "a\u2024\u2024/x": "a\u2024\u2024/x",  # "a..": a plain name
    "": None,
    ".": None,
    "/": None,
    "//": None,
    "\\": None,
    " ": None,
    "x\0y": None,
    "x\ny": None,
    "x\ry": None,
    "x\x1b[31m": None,
    "x\x7f": None,
    "x\x85": None,  # a C1 control
    "x\ud800": None,  # a lone surrogate (a name that was no UTF-8)
    "trailing.": "trailing.",
    "trailing ": "trailing ",
    "caf\u00e9/r\u00e9sum\u00e9.json": "caf\u00e9/r\u00e9sum\u00e9.json",
    "\u202egnp.json": "\u202egnp.json",  # a right-to-left override: odd, but a plain name inside
    "/".join(["d"] * 40) + "/x": None,  # deeper than MAX_DEPTH
}


@pytest.mark.parametrize("name", list(CORPUS), ids=[repr(n)[:40] for n in CORPUS])
def test_each_hostile_spelling_is_refused_or_lands_inside(name: str, tmp_path: Path) -> None:
    expected = CORPUS[name]
    root = tmp_path / "root"
    root.mkdir()
    if expected is None:
        with pytest.raises(UnsafeName):
            safepath.relative(name)
        with pytest.raises(UnsafeName):
            safepath.inside(root, name)
        return
    assert safepath.relative(name) == PurePosixPath(expected)
    assert safepath.inside(root, name) == root.resolve() / expected
    fd, rel = safepath.create(root, safepath.relative(name))
    os.close(fd)
    assert (root / rel).is_file() and not [
        p for p in tmp_path.rglob("*") if root not in p.parents and p != root
    ]


def test_long_names_are_shortened_and_stay_distinct() -> None:
    a = safepath.relative("r" * 300 + "a.pt.trace.json")
    b = safepath.relative("r" * 300 + "b.pt.trace.json")
    assert a != b and all(len(n.encode()) <= safepath.MAX_NAME_BYTES for n in (a.name, b.name))
    assert a.name.endswith(".trace.json")
    assert (
        len(safepath.relative("\u00e9" * 300).name.encode()) <= safepath.MAX_NAME_BYTES
    )  # cut on a character


def test_a_link_on_the_way_out_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "out").symlink_to(outside)
    (root / "up").symlink_to("..")
    (root / "file").symlink_to(outside / "planted")
    (root / "inner").mkdir()
    (root / "here").symlink_to("inner")
    for name in ("out/x", "up/outside/x", "file"):
        with pytest.raises(UnsafeName, match="outside"):
            safepath.inside(root, name)
        try:  # made without following any link: refused, or a new file beside the link (never its target)
            fd, rel = safepath.create(root, safepath.relative(name))
        except UnsafeName:
            continue
        os.close(fd)
        assert name == "file" and rel == PurePosixPath("_file") and not (root / rel).is_symlink()
    assert safepath.inside(root, "here/x") == (root / "inner" / "x").resolve()  # a link that stays inside
    assert not list(outside.iterdir())


def test_a_taken_name_gets_a_new_one_and_both_stay(tmp_path: Path) -> None:
    first, a = safepath.create(tmp_path, PurePosixPath("a/b.json"))
    second, b = safepath.create(tmp_path, PurePosixPath("a/b.json"))
    os.close(first)
    os.close(second)
    assert (a, b) == (PurePosixPath("a/b.json"), PurePosixPath("a/_b.json"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["/", "\\", "..", ".", "C:", "\\\\?\\", "//", " ", "\0", "\uff0e", "~", "x"]),
            st.text(max_size=12),
        ),
        max_size=12,
    )
)
def test_any_text_is_refused_or_resolves_inside(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str]
) -> None:
    name = "".join(pieces)
    root = tmp_path_factory.getbasetemp() / "prop-root"
    root.mkdir(exist_ok=True)
    try:
        rel = safepath.relative(name)
    except UnsafeName:
        return
    assert not rel.is_absolute() and ".." not in rel.parts
    joined = Path(os.path.normpath(root / rel))
    assert root in joined.parents, (name, rel)
    assert root.resolve() in safepath.inside(root, name).parents
