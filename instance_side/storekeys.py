"""Names a destination cannot store: the key each is stored under instead (percent-escaped, reversibly; a
`.gpucN` suffix tells two apart), and the name a key was made from (what a restore reads back).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from urllib.parse import unquote_to_bytes


def _undecodable(ch: str) -> bool:
    return "\udc80" <= ch <= "\udcff"  # a byte that is not UTF-8, as os.fsdecode hands it to us


def escape_name(name: str, unsafe: Callable[[str], bool] = _undecodable) -> str:
    """Percent-escape the undecodable bytes, "%" and the characters `unsafe` names: reversible (unescaping
    gives the original bytes), and plain ASCII where the name was not."""
    out = []
    for ch in name:
        if _undecodable(ch):
            out.append(f"%{ord(ch) - 0xDC00:02X}")
        elif ch == "%" or unsafe(ch):
            out.extend(f"%{b:02X}" for b in ch.encode())
        else:
            out.append(ch)
    return "".join(out)


def assign_keys(names: Iterable[str], storable: Callable[[str], bool], escape: Callable[[str], str]) -> dict[str, str]:
    """name -> the key it is stored under, for the names the destination cannot store. An escaped key that
    another name already is (results/ holds both "a%FF" and b"a\xff") gets a suffix: never two files on
    one key."""
    names = list(names)
    taken = {name for name in names if storable(name)}
    keys: dict[str, str] = {}
    for name in sorted(n for n in names if n not in taken):
        keys[name] = free_key(escape(name), taken)
        taken.add(keys[name])
    return keys


def free_key(key: str, taken: Collection[str]) -> str:
    free, n = key, 0
    while free in taken:
        n += 1
        free = f"{key}.gpuc{n}"
    return free


def name_of_key(key: str) -> str:
    """The name an escaped key was made from (escape_name, _fs_escape and _git_escape percent-escape, reversibly;
    a `.gpucN` suffix told two names apart). What a restore reads back from a listing."""
    base = re.sub(r"\.gpuc[0-9]+$", "", key)
    return unquote_to_bytes(base).decode("utf-8", "surrogateescape")


def is_utf8(name: str) -> bool:
    return not any(_undecodable(ch) for ch in name)
