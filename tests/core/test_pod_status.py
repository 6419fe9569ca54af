"""core/pod.Pod is a plain dataclass now (no pydantic on `gpuc ls`'s path): its one check that pydantic's
Literal used to make is kept, since a pod read as a status it is not could be judged wrongly."""

from __future__ import annotations

import pytest

from gpuc.core.pod import POD_STATUSES, Pod


@pytest.mark.parametrize("status", POD_STATUSES)
def test_every_status_gpuc_knows_builds_a_pod(status: str) -> None:
    assert Pod(provider="runpod", id="p1", name="gpuc-abcd1", status=status).status == status  # type: ignore[arg-type]


@pytest.mark.parametrize("status", ["RUNNING", "", "exited ", "gone"])
def test_a_word_outside_them_is_a_mapping_bug_and_raises(status: str) -> None:
    with pytest.raises(ValueError, match="is not one of"):
        Pod(provider="runpod", id="p1", name="gpuc-abcd1", status=status)  # type: ignore[arg-type]
