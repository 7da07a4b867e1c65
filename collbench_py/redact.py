"""Redact secrets from environment captured by the project, by variable name.

nccl-tests `-J` files carry the whole process environment, launcher output can echo it, and NCCL
prints `NAME set by environment to VALUE`. Anything quoted from them into a report, a manifest or the
history database goes through here first: the value of a variable whose name looks like a secret
becomes REDACTED, the name stays (it says what was set).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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

# NAME=VALUE as in `env`, JSON env arrays and shell lines; the value ends at whitespace or a quote.
_ASSIGNMENT = re.compile(r"(?<![\w$])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\s\"',]*)")
# NCCL_DEBUG=INFO prints `NCCL_IB_HCA set by environment to mlx5_0`.
_NCCL_SETTING = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*) set by environment to (?P<value>.*)$")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name may hold a credential."""
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The mapping with the value of every secret-looking name replaced."""
    return {name: REDACTED if is_secret_name(name) else value for name, value in env.items()}


def redact_text(text: str) -> str:
    """A line or a document with `NAME=VALUE` and NCCL's `NAME set by environment to VALUE`
    redacted where NAME looks like a secret; everything else unchanged."""

    def assignment(match: re.Match[str]) -> str:
        if not match["value"] or not is_secret_name(match["name"]):
            return match[0]
        return f"{match['name']}={REDACTED}"

    def setting(match: re.Match[str]) -> str:
        if not is_secret_name(match["name"]):
            return match[0]
        return f"{match['name']} set by environment to {REDACTED}"

    lines = [_NCCL_SETTING.sub(setting, line) for line in text.split("\n")]
    return _ASSIGNMENT.sub(assignment, "\n".join(lines))
