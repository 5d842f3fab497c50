"""The levels' ramp and hold times as the load shape announces them, and the level stamped on new rows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_stress.client.recorder import Recorder
from vllm_stress.master.leveltimes import LevelTimes


class Folder:
    def __init__(self) -> None:
        self.levels: list[tuple[int, float, float, float]] = []

    def write_level(self, users: int, ramp_start: float, hold_start: float, hold_end: float) -> None:
        self.levels.append((users, ramp_start, hold_start, hold_end))


@pytest.fixture
def parts():
    environment = SimpleNamespace(runner=object())
    recorder = Recorder(environment, "local")
    folder = Folder()
    return environment, recorder, folder, LevelTimes(environment, recorder, SimpleNamespace(folder=folder))


def test_a_held_level_is_written_when_it_ends(parts):
    environment, recorder, folder, levels = parts
    levels.started(environment, users=2)
    assert (recorder.level, recorder.measuring) == (2, False)
    levels.started(environment, users=2)  # announced again while it ramps: nothing changes
    levels.held(environment)
    assert recorder.measuring is True and folder.levels == []
    levels.ended(environment)
    assert (recorder.level, recorder.measuring) == (2, False) and levels.open_level is None
    [(users, ramp_start, hold_start, hold_end)] = folder.levels
    assert users == 2 and ramp_start <= hold_start <= hold_end


def test_an_auto_hold_ends_where_its_verdict_window_ended(parts):
    environment, _, folder, levels = parts
    levels.started(environment, users=2)
    levels.held(environment)
    hold_end = levels.open_level[2] + 0.5  # the workers had reported up to then; the verdict judged that window
    levels.ended(environment, hold_end=hold_end)
    levels.started(environment, users=4)
    levels.held(environment)
    levels.ended(environment, hold_end=levels.open_level[2] - 1)  # a worker had sent nothing since the hold began
    (_, _, _, written), (_, _, four_start, four_end) = folder.levels
    assert written == hold_end and four_end == four_start


def test_a_level_never_held_gets_a_hold_of_zero_length(parts):
    environment, recorder, folder, levels = parts
    levels.started(environment, users=4)
    levels.started(environment, users=8)  # the next level's ramp closes it
    levels.close(levels.open_level[1] + 5)  # the run closes
    (four, _, hold_start, hold_end), (eight, ramp_start, eight_hold, eight_end) = folder.levels
    assert (four, eight) == (4, 8) and hold_start == hold_end <= ramp_start
    assert eight_hold == eight_end == ramp_start + 5
    assert recorder.level == 8


def test_other_environments_and_runs_without_a_shape(parts):
    environment, recorder, folder, levels = parts
    levels.started(SimpleNamespace(), users=4)  # another process's shape in the same interpreter
    assert levels.open_level is None and recorder.level == 0
    levels.follow(6)  # no level open: the target user count is the level
    assert recorder.level == 6
    levels.started(environment, users=2)
    levels.follow(6)
    assert recorder.level == 2 and folder.levels == []


def test_a_stretch_at_users_judged_before_stamps_its_rows_but_opens_no_level(parts):
    environment, recorder, folder, levels = parts
    levels.started(environment, users=2)
    levels.held(environment)
    levels.started(environment, users=8)  # the spike: the level of 2 users closes, 8 users open
    levels.started(environment, users=2, judged=False)  # back to 2 users: closes 8, opens nothing
    assert (recorder.level, recorder.measuring) == (2, False) and levels.open_level is None
    assert [users for users, *_ in folder.levels] == [2, 8]
    levels.ended(environment)
    assert [users for users, *_ in folder.levels] == [2, 8]
