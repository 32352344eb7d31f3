"""Credentials never reach an output: ``redact`` masks them in any text torchkiln prints or writes.

Package sources may carry credentials (``https://user:TOKEN@host/simple``); they reach a build only
as a BuildKit secret (see ``torchkiln.building.sources``). Everything else torchkiln shows (plans, ``--json``,
``explain``, error messages, build logs, rendered files) goes through ``redact`` or ``redact_data``.

What counts as a credential: a URL's password (``user:***@``), a URL user name that is itself a
token (long, or shaped like a known token), and strings shaped like well-known tokens anywhere.
Written here because the masking rule is ours (which user names are kept, how a mask looks).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

#: well-known token shapes (Hugging Face, GitHub, GitLab, OpenAI-style, AWS keys, Slack, npm, PyPI, NGC)
TOKEN_SHAPES = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|npm_[A-Za-z0-9]{30,}"
    r"|pypi-[A-Za-z0-9_-]{50,}|nvapi-[A-Za-z0-9_-]{30,})\b"
)
# scheme://userinfo@ : userinfo is everything up to the last '@' before the host (passwords may hold '@'
# only percent-encoded, but be generous: stop at whitespace, quotes and '/'). The scheme itself is not
# required: a mistyped URL ("https[://u:p@h", "https:/u:p@h") still carries a real password.
_URL_USERINFO = re.compile(r"(?P<scheme>:/{1,3})(?P<info>[^/\s'\"<>]*)@")
#: ``user:password@host`` with no URL around it, or a mangled one (a quote or bracket typed into the
#: scheme or the user name): the password is masked wherever that shape stands. Not an image digest
#: (``python:3.11@sha256:…``), which has the shape but no secret.
_USER_PASSWORD_AT = re.compile(r"(?P<user>[^\s:/@'\"<>\[\]{}]*):(?P<password>[^\s/@]+)@(?=[\w\[])(?!sha\d+:)")
#: user names kept as they are when they carry no password (ssh://git@host, https://oauth2@…)
_PLAIN_USER = re.compile(r"^[a-z][a-z0-9._-]{0,15}$")


def _userinfo(m: re.Match[str]) -> str:
    info = m.group("info")
    if "$" in info and re.fullmatch(r"[^:]*(:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)?", info):
        return m.group(0)  # filled from a variable at run time: not a literal credential
    user, sep, _password = info.partition(":")
    if sep:
        shown = user if _PLAIN_USER.match(user) else MASK
        return f"{m.group('scheme')}{shown}:{MASK}@"
    if _PLAIN_USER.match(user) or not user:
        return m.group(0)
    return f"{m.group('scheme')}{MASK}@"


def _password(m: re.Match[str]) -> str:
    password = m.group("password")
    if password == MASK or re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", password):
        return m.group(0)
    # the user name goes the way of a URL's: kept when plain, masked when it may be a token itself
    user = m.group("user")
    return f"{user if not user or _PLAIN_USER.match(user) else MASK}:{MASK}@"


def redact(text: str) -> str:
    """``text`` with every credential masked; text without one is returned unchanged."""
    if "@" in text:
        text = _URL_USERINFO.sub(_userinfo, text)
        if ":" in text:
            text = _USER_PASSWORD_AT.sub(_password, text)
    return TOKEN_SHAPES.sub(MASK, text)


def redact_data(data: Any) -> Any:
    """``redact`` applied to every string (keys too) in JSON-like data."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact_data(k): redact_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(v) for v in data]
    return data


def has_credential(text: str) -> bool:
    return redact(text) != text
