"""Load profiles: the text form, the rate at any time, phase names, and where the load steps up and drops."""

from __future__ import annotations

import pytest

from loadtest.cli.run import profile_option
from loadtest.loadgen.profile import Profile, ProfileError, Segment, parse_duration, parse_profile

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("20", 20.0), ("2.5s", 2.5),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "30x", "1m 30s", "-5s", "-1", "nan", "inf", "30s5"])
def test_bad_durations_name_the_text(text: str) -> None:
    with pytest.raises(ProfileError, match="duration"):
        parse_duration(text)


def test_the_issue_example_is_baseline_hold_cool_down() -> None:
    profile = parse_profile("30s:5,60s:50,30s:5")
    assert profile.segments == (Segment(30, 5, 5), Segment(60, 50, 50), Segment(30, 5, 5))
    assert profile.duration == 120
    assert profile.phases() == ["baseline", "hold", "cool-down"]
    assert [profile.rate_at(t) for t in (0, 29.9, 30, 89.9, 90, 120)] == [5, 5, 50, 50, 5, 5]
    assert profile.rate_at(-1) == 0 and profile.rate_at(121) == 0
    assert profile.load_step_at == 30
    assert profile.load_drop_at == 90


def test_ramps_interpolate_and_mark_step_and_drop_at_their_start() -> None:
    profile = parse_profile("10s:8,10s:8..58,20s:58,10s:58..8")
    assert profile.phases() == ["baseline", "ramp-up", "hold", "ramp-down"]
    assert profile.rate_at(15) == pytest.approx(33)
    assert profile.rate_at(45) == pytest.approx(33)
    assert profile.phase_at(12) == "ramp-up"
    assert profile.phase_at(50) == "ramp-down"  # the end belongs to the last segment
    assert profile.load_step_at == 10
    assert profile.load_drop_at == 40
    assert profile.peak_rate == 58


def test_a_profile_that_ends_at_its_peak_has_no_drop_and_a_flat_one_no_step() -> None:
    assert parse_profile("5s:1,5s:10").load_drop_at is None
    flat = parse_profile("1m:20")
    assert flat.load_step_at is None
    assert flat.phases() == ["hold"]


def test_text_round_trips_and_scaling() -> None:
    profile = parse_profile("15s:8, 10s:8..55 ,60s:55")
    assert parse_profile(profile.text()) == profile
    half = profile.scaled(time_factor=0.5)
    assert half.duration == pytest.approx(42.5)
    assert half.rate_at(10) == profile.rate_at(20)


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty entry"),
    ("30s:5,,10s:1", "empty entry"),
    ("30s", "expected DURATION:RATE"),
    ("30s:fast", "bad rate 'fast'"),
    ("30s:-1", "finite number >= 0"),
    ("30s:5..x", "bad rate 'x'"),
    ("soon:5", "bad duration 'soon'"),
    ("0s:5", "longer than 0 s"),
])
def test_bad_profiles_name_the_entry(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(text)


def test_an_empty_profile_is_refused() -> None:
    with pytest.raises(ProfileError):
        Profile(())


def test_run_profile_option_takes_a_bare_rate_and_stretches_to_duration() -> None:
    assert profile_option("50", None) == parse_profile("60s:50")
    assert profile_option("50", "2m") == parse_profile("120s:50")
    assert profile_option("30s:5,60s:50,30s:5", "60s").duration == pytest.approx(60)
    with pytest.raises(ProfileError, match="bare rate"):
        profile_option("lots", None)
    assert profile_option("12.3456789", None).peak_rate == 12.3456789  # kept exactly, not printed and re-read


@pytest.mark.parametrize(("text", "duration", "message"), [
    ("50", "0s", "--duration must be longer than 0 s"),  # not silently the 60 s default
    ("30s:5", "0s", "--duration must be longer than 0 s"),
    ("-3", None, "--profile '-3': the rate must be a finite number >= 0"),
    ("nan", None, "--profile 'nan': the rate must be a finite number >= 0"),
])
def test_run_profile_option_errors_name_the_option(text: str, duration: str | None, message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profile_option(text, duration)
    assert str(caught.value) == message
