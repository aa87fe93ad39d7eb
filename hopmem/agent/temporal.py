"""Time hints in a query, read without a model.

Two things are read from the words of a query:

* the **order intent**: does the question ask for the current state ("now",
  "these days", "latest") or for an earlier one ("first", "originally",
  "before")? It decides which end of a supersession chain ranks first. With no
  cue the current state wins: that is what a question in the present tense
  means.
* a **time window**: an ISO date (``2024-05-03``), ``today``, ``yesterday``,
  ``N days ago``, ``last week``, or, when the memory has a ``day_zero``,
  ``day N`` (days counted from ``day_zero``; convenient for simulations).
  Entries created inside the window become candidates and their time match is
  shown in the explanation; "around" widens the window by a day on each side.

All times are seconds on the memory's clock.

A stored statement's own relative phrases ("yesterday", "last Saturday",
"next month") are resolved against the statement's time by
:func:`resolve_dates`, read as UTC dates (:attr:`MemoryHit.dates`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from dataclasses import dataclass

__all__ = ["TimeHints", "parse_time_hints", "DAY", "DateMention", "resolve_dates", "asks_for_date"]

DAY = 86400.0

_RECENT = re.compile(
    r"\b(now|currently|current|these days|nowadays|at the moment|at present|right now|"
    r"latest|most recent|most recently|recently|today|still|anymore|any more|these days)\b",
    re.IGNORECASE,
)
_ORIGIN = re.compile(
    r"\b(first|originally|original|initially|at the start|at first|to begin with|"
    r"before|earlier|previous|previously|used to|formerly|oldest|back then)\b",
    re.IGNORECASE,
)
#: A question comparing two events ("which came first, A or B?", "before or after"): not a question about
#: an earlier state of one fact.
_COMPARISON = re.compile(r"\bbefore or after\b|\bafter or before\b|\b(first|earlier|before)\b.*\bor\b|"
                         r"\bor\b.*\b(first|earlier)\b", re.IGNORECASE)
_DAY_N = re.compile(r"\b(around |about |on |by )?day (\d{1,5})\b", re.IGNORECASE)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_AGO = re.compile(r"\b(\d{1,4}) days? ago\b", re.IGNORECASE)
_YESTERDAY = re.compile(r"\byesterday\b", re.IGNORECASE)
_LAST_WEEK = re.compile(r"\blast week\b", re.IGNORECASE)
_HINTS = (_RECENT, _ORIGIN, _COMPARISON, _DAY_N, _AGO, _YESTERDAY, _LAST_WEEK)
#: The same patterns without IGNORECASE: on ASCII text, lowercased first, they find the same matches about
#: twice as fast (the case-insensitive patterns differ only on the few non-ASCII letters Unicode folds to ASCII).
_HINTS_CASED = tuple(re.compile(p.pattern) for p in _HINTS)


@dataclass(frozen=True)
class TimeHints:
    """What a query says about time.

    Attributes
    ----------
    order : str or None
        ``"recent"``, ``"origin"`` or ``None`` when the query has no cue (or
        both kinds of cue).
    window : tuple of float or None
        ``(start, end)`` seconds, end exclusive, or ``None``.
    cues : tuple of str
        The words that set ``order`` and ``window``, for explanations.
    """

    order: str | None
    window: tuple[float, float] | None
    cues: tuple[str, ...]


def parse_time_hints(text: str, now: float, day_zero: float | None = None, *,
                     comparisons: bool = False) -> TimeHints:
    """Read :class:`TimeHints` from ``text``; ``now`` is the clock's time.

    With ``comparisons``, a question that compares two events ("which came
    first, A or B?", "before or after") asks for no earlier state: its
    "first" or "before" is not an order cue.
    """
    if text.isascii():
        text, patterns = text.lower(), _HINTS_CASED
    else:
        patterns = _HINTS
    recent_re, origin_re, comparison_re, day_re, ago_re, yesterday_re, last_week_re = patterns
    recent = [m.group(0).lower() for m in recent_re.finditer(text)]
    origin = [m.group(0).lower() for m in origin_re.finditer(text)]
    if comparisons and origin and comparison_re.search(text):
        origin = []
    order = None
    if recent and not origin:
        order = "recent"
    elif origin and not recent:
        order = "origin"
    cues = recent + origin
    window = None
    m = day_re.search(text)
    if m and day_zero is not None:
        day = int(m.group(2))
        start = day_zero + day * DAY
        pad = DAY if (m.group(1) or "").strip().lower() in ("around", "about") else 0.0
        window = (start - pad, start + DAY + pad)
        cues.append(m.group(0).strip().lower())
    elif (m := _ISO.search(text)) is not None:
        try:
            date = _dt.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=_dt.UTC)
            start = date.timestamp()
            window = (start, start + DAY)
            cues.append(m.group(0))
        except ValueError:
            pass
    elif (m := ago_re.search(text)) is not None:
        days = int(m.group(1))
        window = (now - (days + 1) * DAY, now - (days - 1) * DAY)
        cues.append(m.group(0).lower())
    elif yesterday_re.search(text):
        window = (now - 2 * DAY, now)
        cues.append("yesterday")
    elif last_week_re.search(text):
        window = (now - 8 * DAY, now)
        cues.append("last week")
    return TimeHints(order=order, window=window, cues=tuple(dict.fromkeys(cues)))


_ASKS_DATE = re.compile(
    r"^\W*(when\b|(in |on |at )?(what|which) (date|day|week|weekend|month|year|time)\b|how long ago\b)",
    re.IGNORECASE)


def asks_for_date(text: str) -> bool:
    """Whether the question asks when something happened: it opens with "when", "(in/on/at) what (or which)
    date, day, week, weekend, month, year or time", or "how long ago" (English only)."""
    return _ASKS_DATE.search(text) is not None


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE = re.compile(
    r"\b(?:(today|tonight|this morning|this afternoon|this evening|yesterday|tomorrow)"
    r"|(\d{1,3}) (day|week|month|year)s? ago"
    r"|(last|next|this) (week|weekend|month|year|" + "|".join(_WEEKDAYS) + r"))\b",
    re.IGNORECASE)


@dataclass(frozen=True)
class DateMention:
    """A relative phrase of a statement and the date it names, resolved against the statement's time.

    ``date`` is ISO 8601 at the phrase's precision: a day (``"2023-05-07"``),
    an ISO week (``"2023-W18"``), a month (``"2023-06"``) or a year (``"2023"``).
    """

    phrase: str
    date: str


def _shift_month(day: _dt.date, months: int) -> str:
    index = day.year * 12 + day.month - 1 + months
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def _week(day: _dt.date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year:04d}-W{week:02d}"


@functools.lru_cache(maxsize=8192)  # a hit's dates are asked for each time it is recalled; the result is immutable
def resolve_dates(text: str, at: float) -> tuple[DateMention, ...]:
    """The dates a statement made at ``at`` (clock seconds, read as UTC) names by relative phrases.

    Understood: ``today``/``tonight``/``this morning`` (and afternoon,
    evening), ``yesterday``, ``tomorrow``, ``N days/weeks/months/years ago``,
    and ``last``/``next``/``this`` followed by ``week``, ``weekend``,
    ``month``, ``year`` or a weekday. "Last Saturday" is the latest Saturday
    before the statement's day, "next Saturday" the first one after it, "this
    Saturday" the one on or after it; a weekend is named by its Saturday. Each
    phrase once, in order; English only.
    """
    try:
        day = _dt.datetime.fromtimestamp(float(at), tz=_dt.UTC).date()
    except (OverflowError, OSError, ValueError):
        return ()
    out: dict[str, str] = {}
    for m in _RELATIVE.finditer(text):
        phrase = m.group(0).lower()
        if phrase in out:
            continue
        if m.group(1):
            word = m.group(1).lower()
            offset = {"yesterday": -1, "tomorrow": 1}.get(word, 0)
            out[phrase] = (day + _dt.timedelta(days=offset)).isoformat()
        elif m.group(2):
            n, unit = int(m.group(2)), m.group(3).lower()
            if unit == "day":
                out[phrase] = (day - _dt.timedelta(days=n)).isoformat()
            elif unit == "week":
                out[phrase] = _week(day - _dt.timedelta(weeks=n))
            elif unit == "month":
                out[phrase] = _shift_month(day, -n)
            else:
                out[phrase] = f"{day.year - n:04d}"
        else:
            which, unit = m.group(4).lower(), m.group(5).lower()
            step = {"last": -1, "next": 1, "this": 0}[which]
            if unit == "week":
                out[phrase] = _week(day + _dt.timedelta(weeks=step))
            elif unit == "month":
                out[phrase] = _shift_month(day, step)
            elif unit == "year":
                out[phrase] = f"{day.year + step:04d}"
            else:
                target = 5 if unit == "weekend" else _WEEKDAYS.index(unit)
                ahead = (target - day.weekday()) % 7
                if which == "last":
                    date = day - _dt.timedelta(days=(day.weekday() - target) % 7 or 7)
                elif which == "next":
                    date = day + _dt.timedelta(days=ahead or 7)
                else:
                    date = day + _dt.timedelta(days=ahead)
                out[phrase] = date.isoformat()
    return tuple(DateMention(phrase, date) for phrase, date in out.items())
