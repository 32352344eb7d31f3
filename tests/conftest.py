"""Shared fixtures: real engines (or a clean skip), the offline base, the configured wheel mirror.

- ``docker_engine`` / ``podman_engine``: a usable engine, probed for real, else ``pytest.skip``
  with the reason (what is missing, or that the daemon is down).
- ``offline_base`` / ``podman_base``: ``kiln base bootstrap`` (Debian bookworm + python3), built once
  and then reused across test runs by its tag (``kiln-base:bookworm``).
- ``mirror``: the package sources of this machine, from the ``KILN_*`` source variables when any is
  set, else from ``pip config list``; skipped when neither names any source. A CA bundle for TLS is
  taken from the sources, ``SSL_CERT_FILE`` or the system default.
- ``cpu_build``: the CPU example built once per session on the offline base, with a marker CA
  certificate in its CA secret (to prove that the secret reaches no layer).

Nothing here talks to an engine at import or collection time.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from torchkiln.building.bootstrap import BaseRequest, bootstrap
from torchkiln.building.execute import BuildOptions, BuildSummary, build_image
from torchkiln.building.sources import SourceLayer, layer_from_env, layer_from_pip
from torchkiln.engines import Engine, get_engine
from torchkiln.errors import EngineMissingError
from torchkiln.runner import Runner

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SOURCE_VARS = ("KILN_INDEX_URL", "KILN_EXTRA_INDEX_URL", "KILN_FIND_LINKS", "KILN_TORCH_INDEX")


# -- settings ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads the developer's own settings (~/.config/torchkiln/config.toml, ``KILN_BASE`` ...):
    ``KILN_CONFIG`` names a file that does not exist until a test writes it."""
    path = tmp_path_factory.mktemp("settings") / "config.toml"
    monkeypatch.setenv("KILN_CONFIG", str(path))
    for var in ("KILN_BASE", "KILN_SOURCES_FROM_PIP", "KILN_BUILDERS", "KILN_REGISTRY"):
        monkeypatch.delenv(var, raising=False)
    return path


# -- disk headroom ----------------------------------------------------------------------------------
# The engine tests build real images; their layers stay in the engines' build caches after each test
# removes its image (a whole run adds ~40 GB, the cu130 example and the CUDA extension most of it). On
# a shared disk that is more than there may be: after each module of engine tests, when less than
# KILN_TEST_MIN_FREE_GB (default 30) is free, the build caches are pruned (docker's BuildKit cache,
# dangling images of docker and podman; tagged images such as the offline base stay). Within a module
# nothing is pruned, so the tests that check layer reuse see the cache they built.

MIN_FREE_GB = float(os.environ.get("KILN_TEST_MIN_FREE_GB", "30"))


def free_gb() -> float:
    """Free space where the engines keep their data (the root file system here) and the tests their files."""
    paths = [p for p in ("/var/lib/docker", "/var/lib/containers", tempfile.gettempdir(), "/") if os.path.isdir(p)]
    return min(shutil.disk_usage(p).free for p in paths) / 2**30


def prune_engine_caches() -> list[str]:
    """Prune the build caches of the machine's docker and podman; the commands that ran."""
    ran = []
    for cmd in (["/usr/bin/docker", "builder", "prune", "-af"], ["/usr/bin/docker", "image", "prune", "-f"],
                ["podman", "image", "prune", "-f"]):
        if shutil.which(cmd[0]) is None:
            continue
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode == 0:
            ran.append(" ".join(cmd[:3]))
    return ran


@pytest.fixture(autouse=True, scope="module")
def _disk_headroom(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    items = [i for i in request.session.items if i.module is request.module]
    if not any(i.get_closest_marker("engine") for i in items) or free_gb() >= MIN_FREE_GB:
        return
    before = free_gb()
    ran = prune_engine_caches()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # shown in the run's output, not captured
            reporter.write_line(f"\n[disk] {before:.1f} GB free after {request.module.__name__} (< {MIN_FREE_GB:g}): "
                                f"{', '.join(ran) or 'nothing to prune'} -> {free_gb():.1f} GB free")


# -- engines ----------------------------------------------------------------------------------------


def _engine_or_skip(name: str) -> Engine:
    try:
        return get_engine(name, Runner())
    except EngineMissingError as e:
        pytest.skip(f"no usable {name}: {e.message}")


@pytest.fixture(scope="session")
def docker_engine() -> Engine:
    return _engine_or_skip("docker")


@pytest.fixture(scope="session")
def podman_engine() -> Engine:
    return _engine_or_skip("podman")


def _base_or_skip(engine: Engine) -> str:
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap is not installed (needed for the offline base image)")
    if os.geteuid() != 0 and not engine.image_exists(BaseRequest().image):
        pytest.skip("bootstrapping the offline base needs root")
    return bootstrap(engine, BaseRequest()).image


@pytest.fixture(scope="session")
def offline_base(docker_engine: Engine) -> str:
    """``kiln-base:bookworm`` in docker (made once, then found by tag)."""
    return _base_or_skip(docker_engine)


@pytest.fixture(scope="session")
def podman_base(podman_engine: Engine) -> str:
    return _base_or_skip(podman_engine)


# -- package sources --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mirror:
    """The configured sources, as a flag-level layer, plus look-ups in their local folders."""

    layer: SourceLayer

    def local_folders(self) -> list[Path]:
        out: list[Path] = []
        for loc in (*self.layer.find_links, *(self.layer.extra_index_urls), self.layer.index_url or ""):
            if not loc:
                continue
            if loc.startswith("file://"):
                out.append(Path(urllib.request.url2pathname(urllib.parse.urlsplit(loc).path)))
            elif "://" not in loc:
                out.append(Path(loc))
        return [p for p in out if p.is_dir()]

    def has(self, project: str, version: str) -> bool:
        """Whether a local folder (wheel folder or PEP 503 index folder) holds ``project-version…``."""
        prefix = f"{project}-{version}"
        for folder in self.local_folders():
            if any(f.name.startswith(prefix) for f in folder.glob(f"{project}-*")):
                return True
            page = folder / project / "index.html"
            if page.is_file() and prefix in page.read_text(errors="replace"):
                return True
        return False

    def with_ca(self, ca: Path) -> SourceLayer:
        return replace(self.layer, ca_bundle=str(ca))


def source_flags(layer: SourceLayer) -> list[str]:
    """The mirror as command-line flags (the highest layer: the same sources for lock and build)."""
    flags: list[str] = []
    if layer.index_url:
        flags += ["--index-url", layer.index_url]
    for u in layer.extra_index_urls:
        flags += ["--extra-index-url", u]
    for f in layer.find_links:
        flags += ["--find-links", f]
    if layer.torch_index:
        flags += ["--torch-index", layer.torch_index]
    if layer.ca_bundle:
        flags += ["--ca-bundle", layer.ca_bundle]
    if layer.index_strategy:
        flags += ["--index-strategy", layer.index_strategy]
    return flags


def plant_wheel(folder: Path, version: str = "0.1") -> Path:
    """A minimal pure-Python wheel ``kiln-planted VERSION`` in ``folder`` (its RECORD hashes right)."""
    import base64
    import hashlib
    import zipfile

    info = f"kiln_planted-{version}.dist-info"
    files = {
        "kiln_planted/__init__.py": f'VERSION = "{version}"\n'.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: kiln-planted\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: torchkiln-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"kiln_planted-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return wheel


def _system_ca() -> str | None:
    for candidate in (os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def mirror() -> Mirror:
    if any(os.environ.get(v) for v in SOURCE_VARS):
        layer = layer_from_env(os.environ, Path.cwd())
    else:
        try:
            layer = layer_from_pip(Runner())
        except Exception as e:  # no pip: nothing configured
            pytest.skip(f"no package mirror configured ({e})")
    if not (layer.index_url or layer.extra_index_urls or layer.find_links):
        pytest.skip("no package mirror configured: set KILN_FIND_LINKS / KILN_INDEX_URL or pip's find-links")
    ca = layer.ca_bundle or _system_ca()
    return Mirror(replace(layer, origin="test", ca_bundle=ca))


# -- saved images -----------------------------------------------------------------------------------


def iter_layer_files(archive: Path) -> Iterator[tuple[str, tarfile.TarInfo, tarfile.TarFile]]:
    """Every entry of every layer of a docker-archive tar, streamed (nothing extracted to disk).

    Yields (layer path, entry, the layer's open tar) — read a regular file with
    ``layer_tar.extractfile(entry)`` while iterating.
    """
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer_path in manifest[0]["Layers"]:
            f = outer.extractfile(layer_path)
            assert f is not None
            with tarfile.open(fileobj=f, mode="r|*") as inner:
                for entry in inner:
                    yield layer_path, entry, inner


def image_config(archive: Path) -> str:
    """The image configuration JSON (history, env, labels) of a docker-archive tar, as text."""
    with tarfile.open(archive) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))  # type: ignore[arg-type]
        f = outer.extractfile(manifest[0]["Config"])
        assert f is not None
        return f.read().decode()


# -- the CPU example, built once --------------------------------------------------------------------


def context_dir(name: str) -> Path:
    """A build-context folder that is the same on every run: BuildKit keeps one snapshot of a
    context per folder, so fresh temporary folders would pile up copies of the torch wheel. It lies in
    torchkiln's own cache folder, where the wheels are hard-linked rather than copied (the cu130 set is
    3 GB; copies of it filled the shared disk)."""
    from torchkiln.cache import kiln_cache_dir

    return kiln_cache_dir() / "test-contexts" / name


def copy_example(dest: Path, spec: str = "cpu.toml") -> Path:
    """A private copy of an example spec and its app folder; returns the spec path."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(EXAMPLES / spec, dest / spec)
    shutil.copytree(EXAMPLES / "apps", dest / "apps", dirs_exist_ok=True)
    return dest / spec


def make_marker_ca(dest: Path, system_ca: str | None) -> tuple[Path, str]:
    """A CA bundle = the system bundle + a freshly made self-signed certificate; returns (path, marker).

    The marker is a line of the new certificate's base64 body: unique to this run, so finding it in
    an image proves the secret leaked.
    """
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a marker CA certificate")
    key, cert = dest / "marker.key", dest / "marker.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=torchkiln test CA",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    body = [ln for ln in cert.read_text().splitlines() if ln and not ln.startswith("-----")]
    marker = body[len(body) // 2]
    bundle = dest / "ca-bundle.pem"
    parts = [Path(system_ca).read_text()] if system_ca else []
    bundle.write_text("".join(parts) + "\n" + cert.read_text())
    return bundle, marker


@pytest.fixture(scope="session")
def example_copy():  # type: ignore[no-untyped-def]
    """``example_copy(dest, spec="cpu.toml") -> spec path``: a private copy of an example."""
    return copy_example


@pytest.fixture(scope="session")
def stable_context():  # type: ignore[no-untyped-def]
    """``stable_context(name) -> Path``: a build-context folder reused across runs."""
    return context_dir


@pytest.fixture(scope="session")
def layer_files():  # type: ignore[no-untyped-def]
    """``layer_files(archive)``: iterate the entries of every layer of a saved image."""
    return iter_layer_files


@pytest.fixture(scope="session")
def saved_config():  # type: ignore[no-untyped-def]
    """``saved_config(archive) -> str``: the image configuration JSON of a saved image."""
    return image_config


@dataclass(frozen=True)
class BuiltImage:
    engine: Engine
    spec: Path
    options: BuildOptions
    summary: BuildSummary
    ca_marker: str

    @property
    def ref(self) -> str:
        return self.summary.image

    def run(self, *argv: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        r = self.engine.run(self.ref, list(argv), user=user, check=False)
        return subprocess.CompletedProcess(list(argv), r.returncode, r.stdout, r.stderr)


@pytest.fixture(scope="session")
def cpu_build(
    docker_engine: Engine, offline_base: str, mirror: Mirror, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BuiltImage]:
    if not mirror.has("torch", "2.13.0+cpu"):
        pytest.skip("the configured mirror has no CPU torch 2.13.0 wheel")
    work = tmp_path_factory.mktemp("cpu-build")
    spec = copy_example(work / "spec")
    ca, marker = make_marker_ca(work, mirror.layer.ca_bundle)
    options = BuildOptions(
        base=offline_base,
        tag=f"kiln-test/example-cpu:session-{os.getpid()}",  # unique: parallel sessions share one daemon
        context_dir=context_dir("cpu-session"),
        flags=mirror.with_ca(ca),
    )
    summary = build_image(spec, docker_engine, options, env={})
    yield BuiltImage(docker_engine, spec, options, summary, marker)
    docker_engine.remove_image(summary.image)  # the layers stay in the build cache for the next run


# -- registries and a second daemon (tests/services.py) ---------------------------------------------

#: planted in the registry password: finding it in any output, layer or label proves a leak
REGISTRY_PASSWORD_MARKER = "kiln-registry-pw-marker-5c1e"


def _service_or_skip(start):  # type: ignore[no-untyped-def]
    from services import ServiceUnavailable

    try:
        return start()
    except ServiceUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A plain-HTTP registry on 127.0.0.1 without authentication (Docker treats loopback as insecure)."""
    from services import start_registry

    reg = _service_or_skip(lambda: start_registry(tmp_path_factory.mktemp("registry")))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def secure_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A TLS registry (throwaway CA, trusted by the daemon through certs.d) behind htpasswd."""
    from services import start_registry

    reg = _service_or_skip(lambda: start_registry(
        tmp_path_factory.mktemp("secure-registry"), tls=True, user="kiln-ci",
        password=f"{REGISTRY_PASSWORD_MARKER}-{os.getpid()}",
    ))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def second_daemon() -> Iterator[object]:
    """A second dockerd with an empty cache (a second CI machine); reach it with ``.env`` (DOCKER_HOST)."""
    from services import start_daemon

    work = Path(tempfile.mkdtemp(prefix="kd2-", dir="/tmp"))  # short: containerd's socket paths
    daemon = _service_or_skip(lambda: start_daemon(work))
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def second_engine(second_daemon: object) -> Engine:
    """torchkiln's docker engine, pointed at the second daemon."""
    return get_engine("docker", Runner(env=second_daemon.env))  # type: ignore[attr-defined]


# -- tests marked ``network`` (tests/network/) -------------------------------------------------------------
# They read the public package index and run only when asked for: ``pytest -m network`` (a marker expression
# that selects ``network``) or ``KILN_NETWORK_TESTS=1``. Otherwise they are deselected (not skipped: the
# README's test command reports no skip but GPU and apptainer ones). Asked for but PyPI cannot be reached:
# skipped with that reason. (Here, not in a tests/network/conftest.py: a second module named ``conftest``
# shadows this one for the tests that import helpers from it.)

PYPI = "https://pypi.org/simple/"


def _network_asked(config: pytest.Config) -> bool:
    expr = config.getoption("-m") or ""
    return os.environ.get("KILN_NETWORK_TESTS") == "1" or ("network" in expr and "not network" not in expr)


def _pypi_unreachable() -> str | None:
    try:
        urllib.request.urlopen(urllib.request.Request(PYPI + "torch/", method="HEAD"), timeout=15).close()
    except OSError as e:
        return f"PyPI is not reachable ({e})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [i for i in items if i.get_closest_marker("network") is not None]
    if not marked:
        return
    if not _network_asked(config):
        items[:] = [i for i in items if i.get_closest_marker("network") is None]
        config.hook.pytest_deselected(items=marked)
        return
    reason = _pypi_unreachable()
    if reason:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))
