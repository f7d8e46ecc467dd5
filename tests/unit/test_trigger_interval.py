"""A view's trigger_interval: seconds, or a number and a unit as Spark spells it; anything else
is refused by the builder, naming the value."""

from __future__ import annotations

import pytest

from kvstore.errors import InvalidArgument
from spark_sink.materialized_view import MaterializedViewBuilder, interval_seconds


@pytest.mark.parametrize(
    "given, seconds",
    [
        (2, 2.0),
        (0.25, 0.25),
        ("200 milliseconds", 0.2),
        ("1 second", 1.0),
        ("0 seconds", 0.0),
        ("interval 2 minutes", 120.0),
        ("1.5s", 1.5),
        ("100ms", 0.1),
        ("1 hour", 3600.0),
    ],
)
def test_intervals_as_spark_spells_them(given, seconds):
    assert interval_seconds(given) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["soon", "5 fortnights", "", "-1 second", -1, "1 second 2"])
def test_a_bad_interval_is_refused_naming_it(bad):
    with pytest.raises(InvalidArgument, match="trigger_interval"):
        interval_seconds(bad)
    with pytest.raises(InvalidArgument, match=repr(bad).replace("(", r"\(")):
        MaterializedViewBuilder(None).trigger_interval(bad)  # type: ignore[arg-type]
