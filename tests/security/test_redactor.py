"""The redactor: whole keys, escaped forms, fragments of 12+ characters, redact-then-clip."""

from __future__ import annotations

import html
import json
from urllib.parse import quote

import pytest

from exporter.log import FRAGMENT, REDACTED, Redactor
from tests.security.conftest import canary, leaks

KEY = canary()


@pytest.fixture
def redact() -> Redactor:
    return Redactor([KEY])


def test_a_whole_key_is_replaced(redact) -> None:
    text = f"Incorrect API key provided: {KEY}."
    assert redact(text) == f"Incorrect API key provided: {REDACTED}."


@pytest.mark.parametrize("start", range(0, len(KEY) - FRAGMENT + 1, 3))
@pytest.mark.parametrize("length", [FRAGMENT, 20, 33])
def test_every_fragment_of_twelve_or_more_characters_is_removed(redact, start, length) -> None:
    piece = KEY[start:start + length]
    for text in (piece, f"id={piece}", f"x{piece}y", f"{piece} and {piece}", f"«{piece}»"):
        out = redact(text)
        assert not leaks(out, [KEY]), (text, out)
        assert REDACTED in out


@pytest.mark.parametrize("case", [str.lower, str.upper, str.swapcase, str.title])
def test_a_key_in_another_letter_case_is_still_the_key(redact, case) -> None:
    # A refusal that lists "supported values" is lower-cased before it becomes advice.
    for text in (f"Supported values are: '{case(KEY)}'.", case(KEY[3:30]),
                 quote(case(KEY), safe=""), json.dumps({"v": case(KEY)})):
        out = redact(text)
        assert not leaks(out, [KEY]) and REDACTED in out, (text, out)
    assert not leaks(redact.net(f"<td>{case(KEY)}</td>"), [KEY])
    short = Redactor(["Bearer abcdefgh"])  # pieces under FRAGMENT: found whole, any case
    assert short("auth: BEARER ABCDEFGH!") == f"auth: {REDACTED}!"


def test_pieces_shorter_than_a_fragment_and_other_text_survive(redact) -> None:
    short = KEY[-(FRAGMENT - 1):]
    text = f"model-name-170 chatcmpl-9Qx7ZkY2 {short} – ünïcode 1712345678.123"
    assert redact(text) == text


@pytest.mark.parametrize("escape", [
    lambda k: quote(k, safe=""), html.escape, lambda k: json.dumps(k)[1:-1]])
def test_escaped_forms_of_a_key_with_special_characters_are_known(escape) -> None:
    key = 'pa"ss/wo<rd>&+=%20 key'
    redact = Redactor([key])
    assert escape(key) != key
    assert redact(f"echo {escape(key)} end") == f"echo {REDACTED} end"


def test_a_password_inside_any_url_is_removed_even_when_unknown() -> None:
    text = "proxy https://alice:s3cr3t-pw@proxy.example:3128/ failed; see http://host:80/x@y"
    assert Redactor()(text) == (f"proxy https://alice:{REDACTED}@proxy.example:3128/ failed; "
                                "see http://host:80/x@y")


@pytest.mark.parametrize("cut", [80, 120, 200, 300])
@pytest.mark.parametrize("before", [1, 11, 12, 25, 39, 50])
def test_clip_redacts_before_it_cuts_a_key_straddling_the_cut(redact, cut, before) -> None:
    text = "x" * (cut - before) + KEY + " and more text after it" * 20
    out = redact.clip(text, cut)
    assert len(out) <= cut
    assert not leaks(out, [KEY]), out
    assert out.startswith("x" * (cut - before))


def test_clip_reads_only_the_start_of_a_long_text(redact) -> None:
    huge = "y" * 5_000_000 + KEY
    assert redact.clip(huge, 80) == "y" * 79 + "…"


def test_secrets_of_an_earlier_config_stay_known_after_a_reload() -> None:
    old, new = canary("old"), canary("new")
    redact = Redactor([old])
    redact.update([new])
    assert redact(f"{old} {new}") == f"{REDACTED} {REDACTED}"
    redact.forget()
    assert redact(old) == old


def test_every_string_of_a_document_is_redacted_keys_included(redact) -> None:
    doc = {"a": [KEY, {"b": KEY[5:30]}], KEY: 1, "n": 2.5, "none": None}
    out = redact.tree(doc)
    assert not leaks(json.dumps(out), [KEY])
    assert out["n"] == 2.5 and out["none"] is None


def test_text_without_secrets_known_is_returned_as_is() -> None:
    text = "nothing to see " * 100
    assert Redactor()(text) is text


@pytest.mark.parametrize("spaces", [0, 1, 50, 400, 1500, 2500, 2600, 2700, 3000])
@pytest.mark.parametrize("limit", [40, 300])
def test_words_reads_only_the_start_and_leaks_no_piece_at_its_end(redact, spaces,
                                                                  limit) -> None:
    # A body of whitespace and a key: wherever reading stops, no piece of the key is shown.
    for text in (" " * spaces + KEY + " tail", "x " * spaces + KEY * 3, " \n" * spaces + KEY):
        out = redact.words(text, limit)
        assert not leaks(out, [KEY]) and len(out) <= limit, (spaces, out)
        assert KEY[:4] not in out or out.endswith(REDACTED) or REDACTED in out


@pytest.mark.parametrize("piece", range(1, FRAGMENT))
def test_words_drops_a_key_cut_short_where_reading_stops(redact, piece) -> None:
    limit = 40
    need = limit + len(KEY) + 64  # the clip's reach (KEY's escaped forms are KEY itself)
    text = " " * (4 * need - piece) + KEY
    assert text[:4 * need].endswith(KEY[:piece])  # reading stops `piece` characters in
    assert redact.words(text, limit) == ""
