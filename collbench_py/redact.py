"""Redact secrets from environment captured by the project, by variable name.

nccl-tests `-J` files carry the whole process environment, launcher output can echo it, and NCCL
prints `NAME set by environment to VALUE`. Anything quoted from them into a report, a manifest or the
history database goes through here first: the value of a variable whose name looks like a secret
becomes REDACTED, the name stays (it says what was set).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"

# Names holding credentials: *TOKEN*, *SECRET*, *PASSWORD*, *KEY* (API_KEY, SSH_KEY, not KEYBOARD),
# cloud credentials by prefix, and the usual spellings of the same.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(?:OR)?D|PASSPHRASE|PWD$|CREDENTIAL|PRIVATE|AUTH|COOKIE|SESSION|"
    r"(?:^|_)KEYS?(?:_|$)|APIKEY|ACCESSKEY|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^GCP_|^HF_|^WANDB_|^DATABASE_URL$",
    re.IGNORECASE,
)
# PWD is the working directory, not a password.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})
# Every ASCII text a secret name or a private key block can be found in holds one of these, in
# upper case (a `NAME: VALUE` line's dashes read as underscores): a text without any is returned as
# it is, a few substring searches instead of five substitutions (a 4,000-host report stores some
# 150,000 verdict reasons).
_SECRET_WORDS = (
    "TOKEN", "SECRET", "PASSW", "PASSPHRASE", "PWD", "CREDENTIAL", "PRIVATE", "AUTH", "COOKIE",
    "SESSION", "KEY", "AWS_", "AWS-", "AZURE_", "AZURE-", "GOOGLE_APPLICATION", "GOOGLE-APPLICATION",
    "GCP_", "GCP-", "HF_", "HF-", "WANDB_", "WANDB-", "DATABASE_URL", "DATABASE-URL",
)  # fmt: skip
_SECRET_WORD = re.compile("|".join(map(re.escape, _SECRET_WORDS)))  # one search, not one per word

# NAME=VALUE as in `env`, shell lines (`export NAME='a b'`, `declare -x NAME="v"`) and env arrays. A
# value in quotes runs to the closing quote; inside a quoted item (`"NAME=v",` of a JSON array,
# `'NAME=v'` of a Python list) the value ends at the quote, as it does at whitespace or a comma.
_ASSIGNMENT = re.compile(
    r"(?<![\w$])(?P<open>[\"'])?(?P<name>[A-Za-z_][A-Za-z0-9_]*)="
    r"(?P<value>(?(open)[^\s\"',]*|(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',]*)))"
)
# "NAME": "VALUE" of a JSON object, 'NAME': 'VALUE' of a Python dict (os.environ printed).
_MAPPING = re.compile(
    r"(?P<q>[\"'])(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P=q)\s*:\s*"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|[^\s,{}\[\]\"']+)"
)
# NAME: VALUE at the start of a line (YAML, `Authorization: Bearer ...` headers).
_KEY_LINE = re.compile(r"^(?P<lead>\s*(?:-\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_-]*):[ \t]+(?P<value>\S.*)$")
# A PEM private key (ssh, TLS) pasted into a log or a file: removed whole, its body lines are no
# NAME=VALUE. A block cut before its END line (a log read in part) runs to the end of the text.
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
)
PRIVATE_KEY_REMOVED = "<private key removed>"
# NCCL_DEBUG=INFO prints `NCCL_IB_HCA set by environment to mlx5_0`.
_NCCL_SETTING = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*) set by environment to (?P<value>.*)$")


@functools.lru_cache(maxsize=8192)  # names repeat: the same facts keys on every host of a fleet
def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name may hold a credential."""
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The mapping with the value of every secret-looking name replaced."""
    return {name: REDACTED if is_secret_name(name) else value for name, value in env.items()}


def without_private_keys(text: str) -> tuple[str, int]:
    """The text with every private key block replaced by PRIVATE_KEY_REMOVED, and how many there were.
    Run it on a whole text before picking lines from it: a key's body lines say nothing alone."""
    return _PRIVATE_KEY_BLOCK.subn(PRIVATE_KEY_REMOVED, text)


def _may_hold_secret(text: str) -> bool:
    if not text.isascii():
        return True  # case-insensitive beyond ASCII (the long s is an s): the rules below decide
    return _SECRET_WORD.search(text.upper()) is not None


def redact_text(text: str) -> str:
    """A line or a document with the value of every secret-looking NAME redacted, wherever it is
    written as `NAME=VALUE` (quoted or not), `"NAME": "VALUE"`, `NAME: VALUE` opening a line, or
    NCCL's `NAME set by environment to VALUE`, and private key blocks removed; everything else
    unchanged."""
    if not _may_hold_secret(text):
        return text
    text = without_private_keys(text)[0]

    def assignment(match: re.Match[str]) -> str:
        if not match["value"] or not is_secret_name(match["name"]):
            return match[0]
        return f"{match['open'] or ''}{match['name']}={REDACTED}"

    def mapping(match: re.Match[str]) -> str:
        if not is_secret_name(match["name"]):
            return match[0]
        head = match[0][: match.start("value") - match.start()]
        quote = match["value"][0] if match["value"][0] in "\"'" else ""
        return f"{head}{quote}{REDACTED}{quote}"

    def key_line(match: re.Match[str]) -> str:
        if not is_secret_name(match["name"].replace("-", "_")):
            return match[0]
        return f"{match['lead']}{match['name']}: {REDACTED}"

    def setting(match: re.Match[str]) -> str:
        if not is_secret_name(match["name"]):
            return match[0]
        return f"{match['name']} set by environment to {REDACTED}"

    lines = [_KEY_LINE.sub(key_line, _NCCL_SETTING.sub(setting, line)) for line in text.split("\n")]
    return _ASSIGNMENT.sub(assignment, _MAPPING.sub(mapping, "\n".join(lines)))


def redact_value(value: Any) -> Any:
    """A JSON-like value (facts, parameters) with secret-named keys' values and secrets in its strings
    redacted, its shape unchanged."""
    if isinstance(value, dict):
        return {
            key: REDACTED if is_secret_name(str(key)) and item is not None else redact_value(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    return redact_text(value) if isinstance(value, str) else value
