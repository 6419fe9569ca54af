"""PLACEHOLDER on the laptop's branch (h-lap): the POD helper writes the real module (the onstart script a
re-rented pod boots with). Only the names the laptop uses are here; the lead takes the pod helper's file."""

from __future__ import annotations

BOOT_TICKET_ENV = "GPUC_BOOT_TICKET"
BOOT_URL_ENV = "GPUC_BOOT_URL"
BOOT_FILE = "boot.json"


def onstart_script() -> str:
    return "#!/bin/sh\n"
