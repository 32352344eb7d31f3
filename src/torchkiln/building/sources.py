"""Package sources for builds: indexes, wheel folders, the torch index, a CA bundle, host networking.

Where they come from, highest precedence first (each field is taken from the first layer that sets
it; lists are not concatenated across layers):

1. command-line flags (``--index-url``, ``--extra-index-url``, ``--find-links``, ``--torch-index``,
   ``--ca-bundle``, ``--network``);
2. environment variables ``KILN_INDEX_URL``, ``KILN_EXTRA_INDEX_URL`` (space-separated),
   ``KILN_FIND_LINKS`` (space-separated), ``KILN_TORCH_INDEX``, ``KILN_CA_BUNDLE``, ``KILN_NETWORK``;
3. the spec's ``[sources]`` table (relative folders are relative to the spec);
4. the user's settings file's ``[sources]`` (``torchkiln.settings``, ``kiln config``);
5. with ``--sources-from-pip`` (or ``sources_from_pip = true`` in the settings): the host's pip
   configuration (``pip config list``: index-url, extra-index-url, find-links, cert).

How they reach a build without ever reaching a layer, a build argument or the history:

- a ``uv.toml`` generated here (index-url, extra-index-url, find-links) is passed as the BuildKit
  secret ``kiln-uv``, the CA bundle as the secret ``kiln-ca``; the Dockerfile mounts both and its
  ``/kiln/sources.sh`` exports ``UV_CONFIG_FILE`` / ``SSL_CERT_FILE`` only when they exist;
- local wheel folders are linked into the build context's ``.kiln/wheels`` (mounted at
  ``/kiln/wheels`` during installs, never copied into an image);
- a local PEP 503 index *folder* (a path or ``file://`` URL) is served over HTTP on 127.0.0.1 for the
  duration of the build, and the build then uses host networking to reach it.

Written here because no library translates pip/uv source settings into build secrets.
"""

from __future__ import annotations

import base64
import functools
import http.client
import http.server
import json
import os
import shlex
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from torchkiln.contract import SECRET_CA, SECRET_UV
from torchkiln.errors import SourceError
from torchkiln.fsio import read_bytes, write_private
from torchkiln.redact import redact
from torchkiln.runner import Runner

Network = Literal["default", "host"]

#: where the build context's wheel folder is mounted inside RUN steps (see render/)
WHEELS_IN_BUILD = "/kiln/wheels"
#: the wheel folder inside the build context
WHEELS_IN_CONTEXT = Path(".kiln") / "wheels"

_DIST_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2")


@dataclass(frozen=True)
class SourceLayer:
    """One origin's settings; ``None`` / empty = not set here."""

    origin: str
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    torch_index: str | None = None
    ca_bundle: str | None = None
    network: Network | None = None
    #: uv's index strategy: "first-index" (uv's default), "unsafe-first-match", "unsafe-best-match" (pip's)
    index_strategy: str | None = None
    #: folder that relative paths of this layer are relative to
    base_dir: Path | None = None


@dataclass(frozen=True)
class Sources:
    """The merged sources of one build (paths absolute, URLs as given)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    torch_index: str | None = None
    ca_bundle: str | None = None
    network: Network = "default"
    index_strategy: str | None = None
    #: field name -> origin it was taken from ("flag", "env", "spec", "pip config")
    origins: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.index_url or self.extra_index_urls or self.find_links or self.torch_index or self.ca_bundle)

    def to_dict(self) -> dict[str, Any]:
        """For ``--json`` and ``explain``: URLs with their passwords masked."""
        return {
            "index_url": mask_url(self.index_url),
            "extra_index_urls": [mask_url(u) for u in self.extra_index_urls],
            "find_links": [mask_url(u) for u in self.find_links],
            "torch_index": mask_url(self.torch_index),
            "ca_bundle": self.ca_bundle,
            "network": self.network,
            "index_strategy": self.index_strategy,
            "origins": dict(self.origins),
        }


def mask_url(url: str | None) -> str | None:
    """``https://user:secret@host/x`` → ``https://user:***@host/x`` (see ``torchkiln.redact``)."""
    return redact(url) if url else url


# -- the layers -------------------------------------------------------------------------------------


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(value.split()) if value else ()


def _network(value: str | None, origin: str) -> Network | None:
    if value is None or value == "":
        return None
    if value not in ("default", "host"):
        raise SourceError(
            f"{origin}: network must be 'default' or 'host' (got {value!r}).",
            hint="Use 'host' to let builds reach indexes on this machine or behind its proxy.",
        )
    return "host" if value == "host" else "default"


INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")


def _strategy(value: str | None, origin: str) -> str | None:
    if not value:
        return None
    if value not in INDEX_STRATEGIES:
        raise SourceError(
            f"{origin}: unknown index strategy {value!r}.",
            hint=f"Use one of {', '.join(INDEX_STRATEGIES)} (uv's names; pip behaves like unsafe-best-match).",
        )
    return value


def layer_from_env(env: Mapping[str, str], cwd: Path | None = None) -> SourceLayer:
    return SourceLayer(
        origin="env",
        index_url=env.get("KILN_INDEX_URL") or None,
        extra_index_urls=_split(env.get("KILN_EXTRA_INDEX_URL")),
        find_links=_split(env.get("KILN_FIND_LINKS")),
        torch_index=env.get("KILN_TORCH_INDEX") or None,
        ca_bundle=env.get("KILN_CA_BUNDLE") or None,
        network=_network(env.get("KILN_NETWORK"), "KILN_NETWORK"),
        index_strategy=_strategy(env.get("KILN_INDEX_STRATEGY"), "KILN_INDEX_STRATEGY"),
        base_dir=cwd,
    )


def layer_from_flags(
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[str] = (),
    torch_index: str | None = None,
    ca_bundle: str | None = None,
    network: str | None = None,
    index_strategy: str | None = None,
    cwd: Path | None = None,
) -> SourceLayer:
    return SourceLayer(
        origin="flag",
        index_url=index_url,
        extra_index_urls=tuple(extra_index_urls),
        find_links=tuple(find_links),
        torch_index=torch_index,
        ca_bundle=ca_bundle,
        network=_network(network, "--network"),
        index_strategy=_strategy(index_strategy, "--index-strategy"),
        base_dir=cwd,
    )


def layer_from_plan(sources: Any, spec_dir: Path) -> SourceLayer:
    """From the plan's ``SourcesPlan`` (the spec's ``[sources]`` table)."""
    net = getattr(sources, "network", None)
    return SourceLayer(
        origin="spec",
        index_url=getattr(sources, "index_url", None),
        extra_index_urls=tuple(getattr(sources, "extra_index_urls", ()) or ()),
        find_links=tuple(getattr(sources, "find_links", ()) or ()),
        torch_index=getattr(sources, "torch_index", None),
        # "default" in the spec means "not asked for": a flag or env var may still ask for host
        network="host" if net == "host" else None,
        base_dir=spec_dir,
    )


def parse_pip_config_list(text: str) -> SourceLayer:
    """Parse the output of ``pip config list`` (``section.key='value'`` lines).

    Later lines override earlier ones (pip lists its files in load order); the ``install``
    section overrides ``global``; values from ``PIP_*`` variables (``:env:``) override both.
    """
    rank = {"global": 0, "install": 1, ":env:": 2}
    best: dict[str, tuple[int, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if "=" not in line or "." not in line.split("=", 1)[0]:
            continue
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if section not in rank:
            continue
        try:
            parts = shlex.split(value)
            value = parts[0] if len(parts) == 1 else " ".join(parts)
        except ValueError:
            value = value.strip("'\"")
        r = rank[section]
        if key not in best or r >= best[key][0]:
            best[key] = (r, value)

    def get(key: str) -> str | None:
        return best[key][1] if key in best else None

    return SourceLayer(
        origin="pip config",
        index_url=get("index-url"),
        extra_index_urls=_split(get("extra-index-url")),
        find_links=_split(get("find-links")),
        ca_bundle=get("cert"),
        # pip considers every index equally: keep its behaviour for sources taken from its configuration
        index_strategy="unsafe-best-match" if get("index-url") or get("extra-index-url") else None,
    )


def layer_from_pip(runner: Runner) -> SourceLayer:
    """The host's pip configuration, read with pip itself (``pip config list``)."""
    for argv in ([sys.executable, "-m", "pip"], ["pip3"], ["pip"]):
        if len(argv) == 1 and shutil.which(argv[0]) is None:
            continue
        r = runner.run([*argv, "config", "list"], check=False)
        if r.returncode == 0:
            return parse_pip_config_list(r.stdout)
    raise SourceError(
        "--sources-from-pip: pip is not available to read its configuration.",
        hint="Install pip, or give the sources with --index-url / --find-links / --ca-bundle instead.",
    )


def merge(*layers: SourceLayer) -> Sources:
    """Merge layers, highest precedence first; relative local paths become absolute."""
    out: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in (
        "index_url", "extra_index_urls", "find_links", "torch_index", "ca_bundle", "network", "index_strategy"
    ):
        for layer in layers:
            value = getattr(layer, name)
            if value:
                if name in ("find_links", "ca_bundle"):
                    value = _absolute(value, layer.base_dir)
                elif name in ("index_url", "extra_index_urls", "torch_index"):
                    value = _absolute_index(value, layer.base_dir)
                out[name] = value
                origins[name] = layer.origin
                break
    return Sources(
        index_url=out.get("index_url"),
        extra_index_urls=tuple(out.get("extra_index_urls", ())),
        find_links=tuple(out.get("find_links", ())),
        torch_index=out.get("torch_index"),
        ca_bundle=out.get("ca_bundle"),
        network=out.get("network", "default"),
        index_strategy=out.get("index_strategy"),
        origins=tuple(origins.items()),
    )


def _is_url(s: str) -> bool:
    return "://" in s


def _absolute_one(s: str, base: Path | None) -> str:
    if _is_url(s) or base is None or os.path.isabs(s):
        return s
    return str((base / s).resolve())


def _absolute(value: Any, base: Path | None) -> Any:
    if isinstance(value, tuple):
        return tuple(_absolute_one(v, base) for v in value)
    return _absolute_one(value, base)


def _absolute_index(value: Any, base: Path | None) -> Any:
    # an index given as a relative folder ("./mirror/simple") is local; URLs stay as they are
    def one(s: str) -> str:
        return _absolute_one(s, base) if (s.startswith(".") or "/" in s) and not _is_url(s) else s

    if isinstance(value, tuple):
        return tuple(one(v) for v in value)
    return one(value)


def resolve_sources(
    *,
    flags: SourceLayer | None = None,
    env: Mapping[str, str] | None = None,
    plan_sources: Any = None,
    spec_dir: Path | None = None,
    from_pip: bool = False,
    runner: Runner | None = None,
    cwd: Path | None = None,
    user: SourceLayer | None = None,
) -> Sources:
    """Flags > environment > spec > the user's settings > (optionally) the host's pip configuration."""
    cwd = cwd or Path.cwd()
    layers = [flags or SourceLayer("flag"), layer_from_env(os.environ if env is None else env, cwd)]
    if plan_sources is not None:
        layers.append(layer_from_plan(plan_sources, spec_dir or cwd))
    if user is not None:
        layers.append(user)
    if from_pip:
        layers.append(layer_from_pip(runner or Runner()))
    merged = merge(*layers)
    fallback = getattr(plan_sources, "project_torch_index", None)
    if fallback and not (merged.torch_index or merged.index_url or merged.extra_index_urls or merged.find_links):
        # [project]: torch from the PyTorch index the project names, when nothing else says where packages come from
        merged = replace(merged, torch_index=fallback, origins=(*merged.origins, ("torch_index", "project")))
    return merged


# -- turning sources into build inputs --------------------------------------------------------------


def local_folder(location: str) -> Path | None:
    """The folder a location names, when it is local (a path or a ``file://`` URL)."""
    if location.startswith("file://"):
        parsed = urllib.parse.urlsplit(location)
        return Path(urllib.request.url2pathname(parsed.path))
    if _is_url(location):
        return None
    return Path(location)


def render_uv_toml(
    *,
    index_url: str | None,
    extra_index_urls: Sequence[str],
    find_links: Sequence[str],
    index_strategy: str | None = None,
) -> str:
    """The ``uv.toml`` handed to builds as the ``kiln-uv`` secret (pure)."""
    lines = ["# generated by torchkiln for one build; passed as a build secret, never stored in the image"]
    if index_url:
        lines.append(f"index-url = {json.dumps(index_url)}")
    if extra_index_urls:
        lines.append("extra-index-url = [" + ", ".join(json.dumps(u) for u in extra_index_urls) + "]")
    if find_links:
        lines.append("find-links = [" + ", ".join(json.dumps(u) for u in find_links) + "]")
    if index_strategy:
        lines.append(f"index-strategy = {json.dumps(index_strategy)}")
    return "\n".join(lines) + "\n"


def check_ca_bundle(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise SourceError(
            f"CA bundle {path} does not exist.",
            hint="Give the PEM file of your proxy's or company's root CA with --ca-bundle or KILN_CA_BUNDLE.",
        )
    try:  # a regular file of sane size (a symlink to /dev/zero or a FIFO is refused, not read forever)
        head = read_bytes(p, what="CA bundle", error=lambda m, h: SourceError(m, h))[: 1 << 20]
    except OSError as e:
        raise SourceError(f"CA bundle {path} cannot be read ({e.strerror}).", hint="Check its permissions.") from None
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise SourceError(
            f"CA bundle {path} holds no PEM certificate.",
            hint="Convert it to PEM (`openssl x509 -inform der -in CA.cer -out ca.pem`) and pass the .pem file.",
        )
    return p


def _same_file(have: Path, source: Path | None) -> bool:
    """``have`` (in a context) is ``source``'s file: its hard link, or a copy of the same size and time."""
    if source is None:
        return False
    try:
        a, b = have.stat(), source.stat()
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) or (a.st_size == b.st_size and
                                                           int(a.st_mtime) == int(b.st_mtime))


def link_wheels(folders: Sequence[Path], dest: Path) -> list[str]:
    """Put every distribution file of ``folders`` into ``dest``.

    Distribution files in ``dest`` that are not the current folders' (by name, size and time) are removed, so it
    holds exactly the current folders' files; the same ones are kept (a concurrent build of the context reads them).
    Wheels are hard-linked (torch wheels are GBs) only into torchkiln's own cache folder, the default
    build contexts nobody edits; anywhere else (``kiln build --context DIR``) they are copied, so no
    file the user can reach aliases one of theirs.
    """
    from torchkiln.cache import kiln_cache_dir

    link = dest.resolve().is_relative_to(kiln_cache_dir().resolve())
    wanted: dict[str, Path] = {}
    for folder in folders:
        if not folder.is_dir():
            raise SourceError(
                f"wheel folder {folder} does not exist or is not a folder.",
                hint=(
                    "Fix --find-links, KILN_FIND_LINKS or find_links in the spec's sources table "
                    "(a folder of wheels, or a URL)."
                ),
            )
        for f in sorted(folder.iterdir()):
            if f.is_file() and f.name.endswith(_DIST_SUFFIXES):
                wanted.setdefault(f.name, f)
    if dest.exists():  # keep what is already there and the same (a build of the same context may be reading it)
        for child in dest.iterdir():
            if child.name.endswith(_DIST_SUFFIXES) and not _same_file(child, wanted.get(child.name)):
                child.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for name, f in wanted.items():
        if not (dest / name).exists():
            try:
                if not link:
                    raise OSError("copy")
                os.link(f, dest / name)
            except OSError:
                shutil.copy2(f, dest / name)
        names.append(name)
    return names


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def copyfile(self, source: Any, outputfile: Any) -> None:
        """Send a file with sendfile(2) rather than the stdlib's copy through Python (measured on a 553 MB
        cuDNN wheel over loopback: 0.09 s of CPU instead of 0.23 s, on the 2 cores uv unpacks the
        wheels with); socket.sendfile falls back to plain sends where it must."""
        try:
            source.fileno()
        except (AttributeError, OSError, ValueError):  # not a file on disk
            super().copyfile(source, outputfile)
            return
        self.wfile.flush()
        self.connection.sendfile(source)


    def handle(self) -> None:
        """A client that hangs up mid-transfer (uv cancelling a download, a build stopped) is not an error."""
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints a traceback into the build's output for any handler error; a connection
        closed by the client is normal, anything else is logged (``--debug``), never printed."""
        import logging
        import sys

        e = sys.exc_info()[1]
        if not isinstance(e, ConnectionError | TimeoutError):
            logging.getLogger("torchkiln.sources").debug("local index server: %r from %s", e, client_address)


@dataclass
class LocalIndexServer:
    """Serves one folder on 127.0.0.1 (a random free port) until ``close``."""

    root: Path
    server: http.server.ThreadingHTTPServer = field(init=False)
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        self.server = _QuietServer(("127.0.0.1", 0), handler)
        # a short poll interval: shutdown() waits for the next poll, and every build closes its servers
        serve = functools.partial(self.server.serve_forever, poll_interval=0.05)
        self.thread = threading.Thread(target=serve, name="kiln-index", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _serve_index(folder: Path, servers: dict[Path, LocalIndexServer]) -> str:
    """Serve a local PEP 503 folder; its parent is the web root, so ``../files/x.whl`` links work."""
    if not folder.is_dir():
        raise SourceError(
            f"index folder {folder} does not exist.",
            hint=(
                "An index given as a path or file:// URL must be a PEP 503 'simple' folder "
                "(one sub-folder per project)."
            ),
        )
    folder = folder.resolve()
    root = folder.parent
    if root not in servers:
        servers[root] = LocalIndexServer(root)
    return f"{servers[root].url}/{urllib.parse.quote(folder.name)}/"


Probe = Callable[[str, ssl.SSLContext], None]


def _http_probe(url: str, context: ssl.SSLContext) -> None:
    headers = {"User-Agent": "torchkiln"}
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:  # urllib does not take credentials from the URL: send them as Basic auth
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        netloc = parts.netloc.rsplit("@", 1)[1]
        url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    req = urllib.request.Request(url, method="HEAD", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20, context=context):
            pass
    except urllib.error.HTTPError:
        return  # the server answered: reachable (an index root may refuse HEAD or listing)


def check_reachable(urls: Sequence[str], ca_bundle: Path | None, probe: Probe = _http_probe) -> None:
    """Raise ``SourceError`` for the first http(s) URL this machine cannot reach."""
    remote = [u for u in urls if u.startswith(("http://", "https://"))]
    if not remote:
        return
    try:
        context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
    except ssl.SSLError as e:
        raise SourceError(
            f"CA bundle {ca_bundle} cannot be loaded ({e.reason or e}).",
            hint="Give a PEM file of CA certificates (BEGIN CERTIFICATE blocks), e.g. your proxy's root CA.",
        ) from None
    for url in remote:
        try:
            probe(url, context)
        except (ValueError, http.client.InvalidURL):  # a bad port or host: never echo the URL's parts unmasked
            raise SourceError(
                f"the package index URL {mask_url(url)} is not a valid URL.",
                hint="Check the host and port (a port is a number) and percent-encode '@', ':' and '/' in the "
                "user name and password.",
            ) from None
        except (urllib.error.URLError, OSError, ssl.SSLError) as e:
            reason = getattr(e, "reason", e)
            shown = mask_url(url)
            if isinstance(reason, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(reason):
                raise SourceError(
                    f"TLS verification failed for the package index {shown}: {reason}.",
                    hint=(
                        "Behind a TLS-intercepting proxy, give its CA bundle with --ca-bundle or KILN_CA_BUNDLE "
                        "(it reaches the build as a secret, never a layer)."
                    ),
                ) from None
            if isinstance(reason, socket.timeout | TimeoutError):
                reason = "timed out"
            raise SourceError(
                f"the package index {shown} cannot be reached from this machine ({reason}).",
                hint=(
                    "Check the URL and the network or proxy settings; for an air-gapped build use a local "
                    "wheel folder (--find-links DIR) or index folder (--index-url DIR), see docs/build.md."
                ),
            ) from None


@dataclass(frozen=True)
class PreparedSources:
    """What a build needs: secrets to pass, the network mode, and a record for the summary."""

    secrets: Mapping[str, Path]
    network: Network
    uv_toml: str
    wheels: tuple[str, ...]
    served: tuple[tuple[str, str], ...]  # (local folder, URL it is served at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "secrets": sorted(self.secrets),
            "network": self.network,
            "wheels": list(self.wheels),
            "served": [{"folder": f, "url": u} for f, u in self.served],
        }


#: the file name of the generated uv configuration in the secrets folder
UV_TOML = "uv.toml"


def secret_paths(sources: Sources, secrets_dir: Path) -> dict[str, Path]:
    """The build secrets ``prepare(sources, ..., secrets_dir=secrets_dir)`` will pass, by id (pure)."""
    secrets: dict[str, Path] = {}
    if sources.index_url or sources.torch_index or sources.extra_index_urls or sources.find_links:
        secrets[SECRET_UV] = secrets_dir / UV_TOML
    if sources.ca_bundle:
        secrets[SECRET_CA] = Path(sources.ca_bundle)
    return secrets


def build_network(sources: Sources) -> Network:
    """The network the build uses: host when a local index folder is served on 127.0.0.1 for it."""
    indexes = [u for u in (sources.index_url, sources.torch_index, *sources.extra_index_urls) if u]
    return "host" if any(local_folder(u) is not None for u in indexes) else sources.network


@contextmanager
def private_folder(path: Path | None) -> Iterator[Path]:
    """``path`` created private (0700) and removed afterwards; a temporary folder when None."""
    if path is None:
        with tempfile.TemporaryDirectory(prefix="kiln-secrets-") as tmp:
            yield Path(tmp)
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=0o700, parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def prepare(
    sources: Sources,
    context_dir: Path,
    *,
    secrets_dir: Path | None = None,
    check_network: bool = True,
    probe: Probe = _http_probe,
) -> Iterator[PreparedSources]:
    """Turn ``sources`` into build inputs for the context at ``context_dir``; clean up afterwards.

    Fills ``.kiln/wheels``, starts the local index servers, writes the secret files in a private
    folder outside the context (``secrets_dir``, made private and removed afterwards; a temporary
    one when None), and checks that remote indexes answer. The secrets and network it yields are
    the ones ``secret_paths`` and ``build_network`` foretell.
    """
    ca = check_ca_bundle(sources.ca_bundle) if sources.ca_bundle else None
    servers: dict[Path, LocalIndexServer] = {}
    served: list[tuple[str, str]] = []
    network: Network = sources.network
    try:

        def mapped(location: str) -> str:
            nonlocal network
            folder = local_folder(location)
            if folder is None:
                return location
            url = _serve_index(folder, servers)
            served.append((str(folder), url))
            network = "host"
            return url

        index_url = mapped(sources.index_url) if sources.index_url else None
        extras = [mapped(u) for u in ((sources.torch_index,) if sources.torch_index else ())]
        extras += [mapped(u) for u in sources.extra_index_urls]
        local_links = [f for f in (local_folder(x) for x in sources.find_links) if f is not None]
        remote_links = [x for x in sources.find_links if local_folder(x) is None]
        wheels = link_wheels(local_links, context_dir / WHEELS_IN_CONTEXT)
        find_links = ([WHEELS_IN_BUILD] if local_links else []) + remote_links

        if check_network:
            ours = {url for _, url in served}
            check_reachable([u for u in [index_url, *extras, *remote_links] if u and u not in ours], ca, probe)

        with private_folder(secrets_dir) as tmp:
            secrets: dict[str, Path] = {}
            uv_toml = ""
            if index_url or extras or find_links:
                uv_toml = render_uv_toml(
                    index_url=index_url,
                    extra_index_urls=extras,
                    find_links=find_links,
                    index_strategy=sources.index_strategy,
                )
                path = tmp / UV_TOML
                write_private(path, uv_toml)  # holds the index token: 0600 from the first byte
                secrets[SECRET_UV] = path
            if ca is not None:
                secrets[SECRET_CA] = ca
            yield PreparedSources(
                secrets=secrets,
                network=network,
                uv_toml=uv_toml,
                wheels=tuple(wheels),
                served=tuple(served),
            )
    finally:
        for s in servers.values():
            s.close()

