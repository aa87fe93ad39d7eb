"""Relative phrases of stored statements, resolved against the statement's own time."""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import AgentMemory
from hopmem.agent.temporal import DateMention, resolve_dates
from hopmem.text.encoders import HashingEncoder

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONDAY = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.UTC).timestamp()


def dates(text: str, at: float = MONDAY) -> dict[str, str]:
    return {d.phrase: d.date for d in resolve_dates(text, at)}


def test_days_weekdays_weeks_months_and_years():
    assert dates("I went to a support group yesterday") == {"yesterday": "2023-05-07"}
    assert dates("Today was long, tomorrow is the show") == {"today": "2023-05-08", "tomorrow": "2023-05-09"}
    assert dates("We hiked last Saturday and meet again next Monday") == {
        "last saturday": "2023-05-06", "next monday": "2023-05-15"}
    assert dates("last Monday") == {"last monday": "2023-05-01"}  # not the statement's own day
    assert dates("this Friday and last weekend") == {"this friday": "2023-05-12", "last weekend": "2023-05-06"}
    assert dates("next month I'm having an art show; last year I moved") == {
        "next month": "2023-06", "last year": "2022"}
    assert dates("3 days ago, 2 weeks ago, 5 months ago") == {
        "3 days ago": "2023-05-05", "2 weeks ago": "2023-W17", "5 months ago": "2022-12"}
    assert dates("next week") == {"next week": "2023-W20"}
    assert dates("A statement with no relative time.") == {}


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.0, max_value=4e9), st.sampled_from(WEEKDAYS))
def test_last_and_next_weekday_fall_within_a_week_on_that_weekday(at, weekday):
    day = dt.datetime.fromtimestamp(at, tz=dt.UTC).date()
    got = dates(f"last {weekday} and next {weekday}", at)
    last = dt.date.fromisoformat(got[f"last {weekday}"])
    nxt = dt.date.fromisoformat(got[f"next {weekday}"])
    assert 1 <= (day - last).days <= 7 and 1 <= (nxt - day).days <= 7
    assert last.strftime("%A").lower() == nxt.strftime("%A").lower() == weekday


def test_hits_carry_their_own_time_and_resolved_dates(tmp_path):
    mem = AgentMemory.open(tmp_path / "m.db", encoder=HashingEncoder(384), namespace="n")
    mem.remember("Caroline: I went to a LGBTQ support group yesterday.", created_at=MONDAY)
    hit = mem.rank("When did Caroline go to the LGBTQ support group?", limit=1)[0]
    assert hit.created_at == MONDAY
    assert hit.dates == (DateMention("yesterday", "2023-05-07"),)
    assert hit.to_dict()["dates"] == [{"phrase": "yesterday", "date": "2023-05-07"}]
    json.dumps(hit.to_dict())
    mem.close()
