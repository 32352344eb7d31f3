"""Settings that stick: what is about this machine (its base mirror, package sources, engine,
builders, registry), not about the image, so a command that worked once works again without
retyping flags.

Layers, highest precedence first (each key is taken from the first layer that sets it; lists are
not concatenated across layers, as pip and uv do not):

1. ``flag``: the command's own option (``--base``, ``--engine``, ``--index-url`` ...);
2. ``env``: a ``KILN_*`` environment variable (``KILN_BASE``, ``KILN_ENGINE``, ``KILN_INDEX_URL`` ...);
3. ``project``: the spec (``[base] image``, ``[sources]``), for the keys a spec can hold;
4. ``user``: the user's file, ``$KILN_CONFIG``, else ``$XDG_CONFIG_HOME/torchkiln/config.toml``
   (``~/.config/torchkiln/config.toml`` when XDG_CONFIG_HOME is unset);
5. ``default``: torchkiln's own (the resolver's base, the first usable engine, no extra sources).

``kiln config`` prints every effective value with its layer; ``kiln config set KEY VALUE`` writes the
user file (whole or not at all). Package sources keep their own merge (``building/sources.py``): this
module hands it the user file's ``[sources]`` as one more layer, between the spec and pip's
configuration. Pure except ``load_user`` and ``write_user`` (one file each).
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from torchkiln.errors import SpecError
from torchkiln.redact import redact

#: a settings file or ``KILN_*`` value that does not validate is an error of the spec's kind (exit code 3)
SettingsError = SpecError

Origin = Literal["flag", "env", "project", "user", "default"]
ORIGINS: tuple[Origin, ...] = ("flag", "env", "project", "user", "default")
ENGINES = ("docker", "podman", "apptainer")
CONFIG_ENV = "KILN_CONFIG"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class SourceSettings(_Strict):
    """The user file's ``[sources]``: this machine's package indexes (URLs may carry credentials: the
    file is the user's own, and builds pass them as secrets only)."""

    index_url: str | None = None
    extra_index_urls: list[str] = Field(default_factory=list)
    find_links: list[str] = Field(default_factory=list)
    torch_index: str | None = None
    ca_bundle: str | None = None
    network: Literal["default", "host"] | None = None
    index_strategy: Literal["first-index", "unsafe-first-match", "unsafe-best-match"] | None = None


class UserSettings(_Strict):
    """The user (machine) file, ``config.toml``: every key optional."""

    base: str | None = Field(default=None, description="base image when the spec's [base] image is empty")
    engine: Literal["docker", "podman", "apptainer"] | None = None
    sources_from_pip: bool | None = None
    builders: list[str] | None = None
    registry: str | None = None
    sources: SourceSettings = Field(default_factory=SourceSettings)

    @field_validator("registry")
    @classmethod
    def _registry(cls, v: str | None) -> str | None:
        if v is not None and (not v or "://" in v or " " in v):
            raise ValueError("must be a registry and optional namespace such as 'localhost:5000' or 'ghcr.io/acme'")
        return v


@dataclass(frozen=True)
class Key:
    """One setting: its name in the file (``sources.index_url``), its variable, its type and meaning."""

    name: str
    env: str | None
    kind: Literal["str", "bool", "list"]
    help: str
    #: where the spec holds it ("" = not a project setting)
    project: str = ""


KEYS: tuple[Key, ...] = (
    Key("base", "KILN_BASE", "str", "base image of specs whose [base] image is empty (e.g. kiln-base:bookworm)",
        "[base] image"),
    Key("engine", "KILN_ENGINE", "str", "docker, podman or apptainer (default: the first usable of docker, podman)"),
    Key("sources_from_pip", "KILN_SOURCES_FROM_PIP", "bool",
        "take package sources from this machine's pip configuration as the lowest layer"),
    Key("builders", "KILN_BUILDERS", "list", "docker builders of `kiln build --matrix` (contexts, DOCKER_HOST URLs)"),
    Key("registry", "KILN_REGISTRY", "str", "where `kiln push` sends an image without --to (HOST[:PORT][/NAMESPACE])"),
    Key("sources.index_url", "KILN_INDEX_URL", "str", "package index (URL or local PEP 503 folder)",
        "[sources] index_url"),
    Key("sources.extra_index_urls", "KILN_EXTRA_INDEX_URL", "list", "additional indexes", "[sources] extra_index_urls"),
    Key("sources.find_links", "KILN_FIND_LINKS", "list", "wheel folders or URLs", "[sources] find_links"),
    Key("sources.torch_index", "KILN_TORCH_INDEX", "str", "index of the torch variant ({variant} is filled in)",
        "[sources] torch_index"),
    Key("sources.ca_bundle", "KILN_CA_BUNDLE", "str", "PEM CA bundle for TLS-intercepting proxies"),
    Key("sources.network", "KILN_NETWORK", "str", "'host': build with host networking", "[sources] network"),
    Key("sources.index_strategy", "KILN_INDEX_STRATEGY", "str", "uv's index strategy (pip's: unsafe-best-match)"),
)
KEY_NAMES = tuple(k.name for k in KEYS)
_BY_NAME = {k.name: k for k in KEYS}


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The user file: ``$KILN_CONFIG``, else ``$XDG_CONFIG_HOME/torchkiln/config.toml``, else ``~/.config/…``."""
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or ""
    root = Path(base).expanduser() if base and Path(base).expanduser().is_absolute() else Path.home() / ".config"
    return root / "torchkiln" / "config.toml"


def _errors(e: ValidationError, origin: str) -> str:
    parts = []
    for err in e.errors()[:6]:
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc, KEY_NAMES, n=1, cutoff=0.5)
            parts.append(f"unknown key '{loc}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        else:
            parts.append(f"'{loc}': {str(err['msg']).removeprefix('Value error, ')}")
    return redact(f"{origin}: " + "; ".join(parts) + ".")


def parse_user(data: Mapping[str, Any], origin: str) -> UserSettings:
    try:
        return UserSettings.model_validate(dict(data))
    except ValidationError as e:
        raise SettingsError(_errors(e, origin), hint=f"Valid keys: {', '.join(KEY_NAMES)}; fix the file, or rewrite "
                            "a key with `kiln config set KEY VALUE` (`kiln config unset KEY` removes it).") from None


def load_user(path: Path | None = None, env: Mapping[str, str] | None = None) -> tuple[UserSettings, Path]:
    """The user file (empty settings when there is none) and its path."""
    p = path or config_path(env)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return UserSettings(), p
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"{p}: cannot be read ({getattr(e, 'strerror', None) or e}).",
                            hint=f"Check its permissions, or point {CONFIG_ENV} at another file.") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{p}: not valid TOML: {e}.", hint="Fix the line named, or remove the file and "
                            "write it again with `kiln config set KEY VALUE`.") from None
    return parse_user(data, str(p)), p


# -- values from text (environment variables, `kiln config set`) ------------------------------------

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def _from_text(key: Key, values: Sequence[str], origin: str) -> Any:
    if key.kind == "list":
        return [item for v in values for item in v.replace(",", " ").split()]
    if len(values) != 1:
        raise SettingsError(f"{origin}: '{key.name}' takes one value (got {len(values)}).",
                            hint=f"Give one value, e.g. kiln config set {key.name} VALUE.")
    value = values[0].strip()
    if key.kind == "bool":
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise SettingsError(f"{origin}: '{key.name}' is true or false (got {value!r}).",
                            hint="Use true/false (or 1/0, yes/no).")
    return value


def _nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in flat.items():
        table, _, leaf = name.rpartition(".")
        (out.setdefault(table, {}) if table else out)[leaf] = value
    return out


def _flat(settings: UserSettings) -> dict[str, Any]:
    data = settings.model_dump(exclude_none=True)
    src = data.pop("sources", {})
    data.update({f"sources.{k}": v for k, v in src.items() if v not in (None, [])})
    return data


def env_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings the environment sets (``KILN_*``), checked like the file's."""
    flat = {}
    for key in KEYS:
        raw = env.get(key.env or "")
        if key.env and raw not in (None, ""):
            flat[key.name] = _from_text(key, [raw], key.env)
    try:
        UserSettings.model_validate(_nested(flat))
    except ValidationError as e:
        names = {k.name: k.env for k in KEYS}
        msg = _errors(e, "environment")
        for n, var in names.items():
            msg = msg.replace(f"'{n}'", f"{var} ('{n}')")
        raise SettingsError(msg, hint="Fix or unset the variable named.") from None
    return flat


# -- the effective settings -------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    origin: Origin
    #: the file, variable or flag it came from ("" for defaults)
    where: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "origin": self.origin, "where": self.where}


@dataclass(frozen=True)
class Settings:
    """Every key's effective value and where it came from."""

    items: tuple[Setting, ...]
    user_file: Path
    user: UserSettings

    def __getitem__(self, key: str) -> Setting:
        for s in self.items:
            if s.key == key:
                return s
        raise KeyError(key)

    def value(self, key: str) -> Any:
        return self[key].value

    @property
    def engine(self) -> str | None:
        """The engine the user asked for (flag, ``KILN_ENGINE`` or the user file); None: the first usable."""
        value = self.value("engine")
        return str(value) if value else None

    @property
    def sources_from_pip(self) -> bool:
        return bool(self.value("sources_from_pip"))

    @property
    def builders(self) -> list[str]:
        return list(self.value("builders") or [])

    @property
    def registry(self) -> str | None:
        value = self.value("registry")
        return str(value) if value else None

    @property
    def base_override(self) -> str | None:
        """The base to build on instead of the plan's: from a flag, the environment, or (only for a spec
        whose ``[base] image`` is empty, since the project outranks the user file) the user file."""
        s = self["base"]
        return s.value if s.origin in ("flag", "env", "user") and s.value else None

    def to_dict(self) -> dict[str, Any]:
        return {"user_file": str(self.user_file), "settings": [s.to_dict() for s in self.items]}


def _project_values(spec: Any) -> dict[str, Any]:
    """What a spec (a ``torchkiln.spec.Spec``) holds of the settings."""
    if spec is None:
        return {}
    out: dict[str, Any] = {}
    if spec.base.image:
        out["base"] = spec.base.image
    s = spec.sources
    for name in ("index_url", "torch_index"):
        if getattr(s, name):
            out[f"sources.{name}"] = getattr(s, name)
    for name in ("extra_index_urls", "find_links"):
        if getattr(s, name):
            out[f"sources.{name}"] = list(getattr(s, name))
    if s.network == "host":
        out["sources.network"] = "host"
    return out


def effective(
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    spec: Any = None,
    spec_origin: str = "kiln.toml",
    user: UserSettings | None = None,
    user_file: Path | None = None,
) -> Settings:
    """Merge the layers: flags > environment > project (``spec``) > user file > defaults.

    ``flags``: the command's options by key (None or an empty list = not given). ``user``: the user
    file's settings (read from ``user_file`` or the default path when None).
    """
    env = os.environ if env is None else env
    if user is None:
        user, user_file = load_user(user_file, env)
    assert user_file is not None or user is not None
    file = user_file or config_path(env)
    layers: list[tuple[Origin, Mapping[str, Any], Any]] = [
        ("flag", {k: v for k, v in (flags or {}).items() if v not in (None, [], ())}, lambda k: _flag_name(k)),
        ("env", env_values(env), lambda k: _BY_NAME[k].env or ""),
        ("project", _project_values(spec), lambda k: f"{spec_origin} {_BY_NAME[k].project}"),
        ("user", _flat(user), lambda k: str(file)),
    ]
    items = []
    for key in KEYS:
        for origin, values, where in layers:
            if key.name in values:
                items.append(Setting(key.name, values[key.name], origin, where(key.name)))
                break
        else:
            items.append(Setting(key.name, _DEFAULTS[key.name], "default"))
    return Settings(tuple(items), file, user)


_DEFAULTS: dict[str, Any] = {
    "base": None, "engine": None, "sources_from_pip": False, "builders": [], "registry": None,
    "sources.index_url": None, "sources.extra_index_urls": [], "sources.find_links": [], "sources.torch_index": None,
    "sources.ca_bundle": None, "sources.network": "default", "sources.index_strategy": None,
}
_FLAGS = {"base": "--base", "engine": "--engine", "sources_from_pip": "--sources-from-pip", "builders": "--builders",
          "registry": "--to", "sources.index_url": "--index-url", "sources.extra_index_urls": "--extra-index-url",
          "sources.find_links": "--find-links", "sources.torch_index": "--torch-index",
          "sources.ca_bundle": "--ca-bundle", "sources.network": "--network",
          "sources.index_strategy": "--index-strategy"}


def _flag_name(key: str) -> str:
    return _FLAGS.get(key, "--" + key.replace("_", "-"))


def describe_default(key: str) -> str:
    """What a default means, for ``kiln config``."""
    return {
        "base": "the resolver's (python:X.Y-slim-bookworm, or [base] image)",
        "engine": "the first usable of docker, podman",
        "sources.network": "default",
    }.get(key, "")


def user_source_layer(settings: Settings) -> Any:
    """The user file's ``[sources]`` as a layer of ``building.sources.merge`` (relative paths: to the file)."""
    from torchkiln.building.sources import SourceLayer

    s = settings.user.sources
    return SourceLayer(
        origin="user config",
        index_url=s.index_url,
        extra_index_urls=tuple(s.extra_index_urls),
        find_links=tuple(s.find_links),
        torch_index=s.torch_index,
        ca_bundle=s.ca_bundle,
        network=s.network if s.network == "host" else None,
        index_strategy=s.index_strategy,
        base_dir=settings.user_file.parent,
    )


# -- writing the user file --------------------------------------------------------------------------


def set_values(current: UserSettings, key: str, values: Sequence[str] | None, origin: str) -> UserSettings:
    """``current`` with ``key`` set from text (``values`` None: removed), checked as a whole."""
    if key not in _BY_NAME:
        close = difflib.get_close_matches(key, KEY_NAMES, n=1, cutoff=0.5)
        raise SettingsError(f"unknown setting '{key}'." + (f" Did you mean '{close[0]}'?" if close else ""),
                            hint=f"Settings: {', '.join(KEY_NAMES)} (`kiln config` lists them).")
    flat = _flat(current)
    if values is None:
        flat.pop(key, None)
    else:
        flat[key] = _from_text(_BY_NAME[key], values, origin)
    return parse_user(_nested(flat), origin)


def render_user(settings: UserSettings) -> str:
    data = settings.model_dump(exclude_none=True)
    sources = {k: v for k, v in data.pop("sources", {}).items() if v not in (None, [])}
    if sources:
        data["sources"] = sources
    head = "# torchkiln settings of this machine (`kiln config` shows them; `kiln config set KEY VALUE` writes them)\n"
    return head + tomli_w.dumps(data)


def write_user(settings: UserSettings, path: Path) -> None:
    """Write the user file whole or not at all (a temporary file beside it, then renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render_user(settings))
        os.chmod(tmp, 0o600)  # index URLs may carry credentials
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
