"""Text that came from a pod, made safe to print on the user's terminal. Stdlib only, and fast: it sits on
the log-streaming path (bench/termsafe_speed.py measures it).

A pod on Vast is a stranger's machine: its job's output, the names, notes and reasons it reports, and the
provider's texts about it all reach the laptop's terminal, and a terminal obeys what it is sent. CSI moves
the cursor and clears the screen; OSC sets the title, plants a link (OSC 8) or writes the clipboard
(OSC 52); DCS talks to the terminal itself; a backspace or carriage return overwrites what is shown, so
a line can be forged over another; bidi controls show text in another order than it was written.
`clean` removes all of it (whole sequences, not just their ESC, so no `[2J` residue is left); what is
left is printable text, tabs and newlines.

A lone carriage return becomes a newline. Dropping it would glue a progress bar's updates into one endless
line; keeping it lets a job overwrite a line it printed (or one gpuc printed) with a forged one. As a
newline, each update of a progress bar is one line, as in a log file, and nothing printed is hidden.
"""

from __future__ import annotations

import functools
import re

# C0 controls but tab and newline, and DEL: deleted byte by byte (bytes.translate, C speed).
_C0 = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])
# Escape sequences, as bytes: CSI (parameters, intermediates, final; cut short: whatever is there); OSC,
# DCS, SOS, PM and APC strings up to BEL or ST (ESC \ or C1 ST), or to the line's end when unterminated;
# any other (charset, keypad mode, full reset: intermediates and a final); and a lone ESC.
_ESC = (
    rb"\x1b(?:\[[0-?]*[ -/]*[@-~]?"
    rb"|[\]PX^_](?:[^\x07\x1b\n\xc2]|\xc2(?!\x9c))*(?:\x07|\x1b\\|\xc2\x9c)?"
    rb"|[ -/]*[0-~]?)"
)
# Past ASCII: C1 controls (and the sequences the C1 CSI, DCS, SOS, OSC, PM and APC start), the bidi
# controls (embeddings and overrides U+202A-202E, isolates U+2066-2069, the marks U+200E/200F/061C).
# Bytes that are not UTF-8 (a raw C1 byte, which an 8-bit terminal obeys, among them) decode as U+FFFD.
_HIGH_CONTROLS = "\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_HIGH = r"\x9b[0-?]*[ -/]*[@-~]?" r"|[\x90\x98\x9d\x9e\x9f][^\x07\x9c\n]*[\x07\x9c]?" f"|[{_HIGH_CONTROLS}]"


@functools.cache
def _compiled() -> tuple[re.Pattern[bytes], re.Pattern[str], re.Pattern[str]]:
    # Compiled on first use: `gpuc ls` imports this module and mostly cleans plain names (no regex).
    return re.compile(_ESC), re.compile(f"[{_HIGH_CONTROLS}]"), re.compile(_HIGH)


def clean_bytes(data: bytes) -> bytes:
    """`data` without any terminal control: valid UTF-8 of printable characters, tabs and newlines."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    esc, high_any, high = _compiled()
    if b"\x1b" in data:
        data = esc.sub(b"", data)
    if not data.isascii():
        text = data.decode("utf-8", "replace")
        if high_any.search(text) is not None:
            text = high.sub("", text)
        data = text.encode()
    return data.translate(None, _C0)


def clean(text: str) -> str:
    """`text` without any terminal control (as `clean_bytes`): a name, a note, a reason, a status text
    read from a pod or a provider, or a message quoting one. A lone surrogate (JSON allows one) becomes
    U+FFFD instead of failing the print."""
    if text.isascii() and text.isprintable():
        return text  # the common case, a short plain name: no copy
    return clean_bytes(text.encode("utf-8", "surrogatepass")).decode()


def clean_line(value: object) -> str:
    """`str(value)` cleaned and on one line (newlines and tabs become spaces): a table cell, or a line of
    gpuc's own quoting a pod, where a newline would let the pod's text start a line that passes for gpuc's
    (or a row of the table)."""
    text = clean(value if isinstance(value, str) else str(value))
    return text.replace("\n", " ").replace("\t", " ") if "\n" in text or "\t" in text else text
