"""Where the CLI finds the control plane: the server's address, the API token and, for a
server on ``https://`` whose certificate no public authority signed, the CA file to trust.

Each is taken from the first place that has it:

1. the flag (``--server``, ``--token``);
2. the environment (``GPUFLEET_SERVER``, ``GPUFLEET_TOKEN``, ``GPUFLEET_CA_FILE``; empty counts
   as unset);
3. the config file: ``$GPUFLEET_CONFIG``, else ``$XDG_CONFIG_HOME/gpufleet/config.yaml``, else
   ``~/.config/gpufleet/config.yaml``, a YAML mapping with the keys ``server``, ``token`` and
   ``ca_file`` (``gpufleet login`` writes it, readable by its owner only);
4. for the server only, ``http://127.0.0.1:8080`` (what ``gpufleet serve`` listens on); for the
   CA file, none (the public authorities).

The file is read only when a flag or variable leaves something unset (the CA file counts only
for an ``https://`` server), so a broken file never stands in the way of explicit flags. This
module owns the precedence, reading and writing the file and checking the address; it does not
talk to the server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpufleet.io.errors import quoted

DEFAULT_SERVER = "http://127.0.0.1:8080"
SERVER_ENV = "GPUFLEET_SERVER"
TOKEN_ENV = "GPUFLEET_TOKEN"
CONFIG_ENV = "GPUFLEET_CONFIG"
CA_FILE_ENV = "GPUFLEET_CA_FILE"
CONFIG_KEYS = ("server", "token", "ca_file")


class ConfigError(Exception):
    """A config file or an address that cannot be used; the message names where and what."""


@dataclass(frozen=True)
class FileConfig:
    server: str | None = None
    token: str | None = None
    ca_file: str | None = None


@dataclass(frozen=True)
class RemoteConfig:
    """The server and token to use, and where each came from (for messages); the CA file
    that signed the server's certificate (None: the public authorities)."""

    server: str
    token: str | None
    server_from: str
    token_from: str | None
    ca_file: str | None = None


def config_path(env: Mapping[str, str]) -> Path:
    """The config file's path (it may not exist)."""
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "gpufleet" / "config.yaml"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".config" / "gpufleet" / "config.yaml"


def read_config_file(path: Path) -> FileConfig:
    """The file's settings; an absent file has none. Raises ConfigError on a malformed one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return FileConfig()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the config file ({error})") from None
    import yaml  # only where there is a file: a command against a server starts faster without

    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as error:  # ValueError: a date such as 2024-13-01
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None:
        return FileConfig()
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping with the keys server, token and ca_file, "
            f"got a {type(data).__name__}"
        )
    unknown = sorted(str(key) for key in data if key not in CONFIG_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {quoted(unknown[0])} (expected {', '.join(CONFIG_KEYS)})"
        )
    values: dict[str, str | None] = {}
    for key in CONFIG_KEYS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{path}: {key} must be a string, got {type(value).__name__}")
        values[key] = value or None
    server = values["server"]
    return FileConfig(
        server=normalize_server(server, f"{path}: server") if server else None,
        token=values["token"],
        ca_file=values["ca_file"],
    )


def normalize_server(text: str, source: str) -> str:
    """``host:port`` or ``http(s)://host[:port]`` -> ``http(s)://host[:port]`` (no '/' at the end).

    ``source`` names where the text came from, for the error message.
    """
    raw = text.strip()
    candidate = raw if "://" in raw else f"http://{raw}"
    try:
        url = httpx.URL(candidate)
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(
            f"{source}: {text!r} is not a server address (expected e.g. http://127.0.0.1:8080)"
        )
    return candidate.rstrip("/")


def resolve(
    server: str | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RemoteConfig:
    """The server, token and CA file from the flags given, the environment and the config
    file."""
    env = os.environ if env is None else env
    server_from = token_from = None
    if server:
        server, server_from = normalize_server(server, "--server"), "--server"
    elif env.get(SERVER_ENV):
        server = normalize_server(env[SERVER_ENV], SERVER_ENV)
        server_from = SERVER_ENV
    if token:
        token_from = "--token"
    elif env.get(TOKEN_ENV):
        token, token_from = env[TOKEN_ENV], TOKEN_ENV
    ca_file = env.get(CA_FILE_ENV) or None
    # the CA matters only over https: a plain address given by flags never reads the file
    https = bool(server) and str(server).startswith("https://")
    if not server or not token or (https and not ca_file):
        path = config_path(env)
        found = read_config_file(path)
        if not server and found.server:
            server, server_from = found.server, str(path)
        if not token and found.token:
            token, token_from = found.token, str(path)
        ca_file = ca_file or found.ca_file
    if not server:
        server, server_from = DEFAULT_SERVER, "default"
    assert server_from is not None
    return RemoteConfig(server, token or None, server_from, token_from, ca_file)


def write_config(path: Path, server: str, token: str, ca_file: str | None = None) -> None:
    """Write the config file, readable and writable by its owner only (it holds a token)."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    settings = {"server": server, "token": token}
    if ca_file is not None:
        settings["ca_file"] = ca_file
    text = yaml.safe_dump(settings, sort_keys=False)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # an existing file keeps its mode through O_CREAT; tighten it before writing the token
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
