"""gpuc.instance_side: what runs inside a rented pod (the agent, the job wrapper, the results sync).

    python -m gpuc.instance_side agent            heartbeats + idle watch, runs for the pod's life
    python -m gpuc.instance_side run -- CMD ...   runs a job, then sync -> notify -> destroy
    python -m gpuc.instance_side sync             pushes results/ and verifies the remote listing
    python -m gpuc.instance_side push             sends what changed since the last verified push (low priority)
    python -m gpuc.instance_side bootstrap        readies the pod: idempotent steps, timed into a CSV
    python -m gpuc.instance_side verify --expect-gpu NAME   is this the machine we pay for? (JSON)
    python -m gpuc.instance_side boot [--again]   a pod starts itself from its boot kit (Vast's onstart)
    python -m gpuc.instance_side selfcheck        can this python run the pod side? (every module, NVML)

Standard library only, on any python3 >= 3.9 (pynvml when the bundle brings it): the pod runs whatever python3
the image has, and gets only gpuc's bundle (client/onpod/bundle.py), nothing from a package index. The agent
lives for hours on every pod and is held to <= 30 MB resident (measured on CPython 3.11: pydantic plus the core
models cost ~19 MB, httpx ~5 MB more than urllib). The laptop validates what it hands over with the pydantic
models; the pod reads the same documents against their JSON Schema (core/wire.py): one declaration.
"""

from __future__ import annotations
