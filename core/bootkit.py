"""PLACEHOLDER (the WATCHDOG helper's branch): the POD helper owns this module and writes the real one; the
lead merges theirs over this. Only the names the watchdog uses are here."""

from __future__ import annotations

BOOT_TICKET_ENV = "GPUC_BOOT_TICKET"
BOOT_URL_ENV = "GPUC_BOOT_URL"


def onstart_script() -> str:
    return "#!/bin/sh\n# gpuc boot: placeholder until core/bootkit.py lands\n"
