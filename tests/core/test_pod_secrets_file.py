"""The pod's secrets file, written by the laptop and read on the pod with the standard library (no python-dotenv
there): whatever a secret holds comes back as it went, and a line gpuc would not write is refused without its
value in the message."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuc.core.errors import ConfigError
from gpuc.core.podsecrets import parse_env_file, render_env_file

NAMES = st.builds(str.__add__, st.sampled_from("ABCXYZ_"), st.text(alphabet="ABZ019_", max_size=12))


@given(st.dictionaries(NAMES, st.text(), max_size=6))
def test_what_is_written_is_read_back(values: dict[str, str]) -> None:
    assert parse_env_file(render_env_file(values)) == values


def test_the_hard_characters() -> None:
    values = {"A": 'quote " back \\ nl \n cr \r tab \t', "B": "", "C": "\\n is not a line break", "D": "é\u2028x"}
    assert parse_env_file(render_env_file(values)) == values


@pytest.mark.parametrize("line", ["A=unquoted-s3cr3t", 'A="open-s3cr3t', 'export A="s3cr3t"', '="s3cr3t"'])
def test_a_line_gpuc_would_not_write_is_refused_by_number(line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_env_file(f'# gpuc\nOK="1"\n{line}\n')
    assert "line 3" in str(caught.value) and "s3cr3t" not in str(caught.value)
