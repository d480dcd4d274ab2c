"""conftest.made_once: what the session's processes (pytest-xdist workers) share is made once, and a failure once."""

from __future__ import annotations

import pytest

from conftest import MADE, made_once


def test_a_record_is_made_once_and_read_back_by_a_process_that_did_not_make_it(tmp_path_factory):
    made = []

    def make() -> dict:
        made.append(1)
        return {"value": len(made)}

    assert made_once(tmp_path_factory, "probe-record", make) == {"value": 1}
    del MADE["probe-record"]  # as another worker sees it: no copy in memory, only the record left on disk
    assert made_once(tmp_path_factory, "probe-record", make) == {"value": 1}
    assert made == [1]


def test_a_failure_is_raised_again_without_making_it_again(tmp_path_factory):
    tries = []

    def make() -> dict:
        tries.append(1)
        raise AssertionError("exit 1: the run failed")

    with pytest.raises(AssertionError, match="the run failed"):
        made_once(tmp_path_factory, "probe-failure", make)
    with pytest.raises(AssertionError, match=r"^probe-failure failed earlier in this session:\nAssertionError: exit 1"):
        made_once(tmp_path_factory, "probe-failure", make)
    assert tries == [1]
