"""Real services for the registry tests, started by the tests themselves (no mocks).

- ``start_registry``: Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1, plain HTTP or
  TLS with a throwaway CA made with openssl (installed for the daemon under
  ``/etc/docker/certs.d/HOST:PORT/ca.crt``), optionally behind htpasswd (bcrypt) authentication.
- ``start_daemon``: a second Docker daemon with its own data root, exec root, socket, pid file and
  bridge (``--iptables=false``): a second CI machine with an empty cache, reached through
  ``DOCKER_HOST``. Not ``--bridge=none``: dockerd started that way deletes the machine's ``docker0``
  at start-up (libnetwork's ``removeDefaultBridgeInterface``), which broke every container the first
  daemon ran afterwards on the default network.

Both reuse a running service when told where it is (``KILN_TEST_REGISTRY=HOST:PORT`` for a
plain-HTTP registry without authentication, ``KILN_TEST_DOCKER_HOST=unix://…`` for a second
daemon), so a developer can keep them up between runs. The bench scripts import this module too.
Written here because no maintained library starts these two servers.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY_BIN = "/usr/bin/docker-registry"
CERTS_D = Path("/etc/docker/certs.d")


class ServiceUnavailable(RuntimeError):
    """The binaries or permissions a service needs are missing (tests skip on this)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check, what: str, log: Path | None, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s\n{tail}")


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 20) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- registry -------------------------------------------------------------------------------------


@dataclass
class Registry:
    """A running registry: ``host`` is ``127.0.0.1:PORT``; ``ref(name)`` names an image in it."""

    host: str
    tls: bool = False
    user: str | None = None
    password: str | None = None
    ca: Path | None = None
    root: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    certs_dir: Path | None = None

    def ref(self, name: str) -> str:
        return f"{self.host}/{name}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    def _get(self, path: str, accept: str | None = None, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.url + path, method=method)
        if self.user is not None:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        if accept:
            req.add_header("Accept", accept)
        ctx = ssl.create_default_context(cafile=str(self.ca)) if self.tls and self.ca else None
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def up(self) -> bool:
        try:
            status, _, _ = self._get("/v2/")
        except OSError:
            return False
        return status in (200, 401)

    def tags(self, repo: str) -> list[str]:
        status, _, body = self._get(f"/v2/{repo}/tags/list")
        return list(json.loads(body).get("tags") or []) if status == 200 else []

    def manifest(self, repo: str, ref: str) -> tuple[str, dict[str, object]] | None:
        """(media type, manifest) of ``repo:ref`` (a tag or digest), or None when absent."""
        accept = ", ".join([
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.v2+json",
        ])
        status, headers, body = self._get(f"/v2/{repo}/manifests/{ref}", accept=accept)
        if status != 200:
            return None
        return headers.get("Content-Type", ""), json.loads(body)

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        """The digest the registry gives ``repo:ref``'s manifest (``Docker-Content-Digest``)."""
        accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
        status, headers, _ = self._get(f"/v2/{repo}/manifests/{ref}", accept=accept, method="HEAD")
        return headers.get("Docker-Content-Digest") if status == 200 else None

    def blob(self, repo: str, digest: str) -> bytes:
        status, _, body = self._get(f"/v2/{repo}/blobs/{digest}")
        if status != 200:
            raise KeyError(digest)
        return body

    def stop(self) -> None:
        _stop(self.proc)
        if self.certs_dir is not None:
            shutil.rmtree(self.certs_dir, ignore_errors=True)


def _htpasswd(user: str, password: str) -> str:
    import bcrypt  # the registry reads bcrypt hashes only

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"


def make_ca_and_cert(work: Path, host: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate it signed for ``host``; returns (ca, cert, key)."""
    if shutil.which("openssl") is None:
        raise ServiceUnavailable("openssl is not installed")
    work.mkdir(parents=True, exist_ok=True)
    ca_key, ca, key, csr, cert = (work / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    ext = work / "san.ext"
    ext.write_text(f"subjectAltName=IP:{host},DNS:localhost\nbasicConstraints=CA:FALSE\n")

    def sh(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    sh("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=torchkiln test registry CA",
       "-keyout", str(ca_key), "-out", str(ca))
    sh("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={host}", "-keyout", str(key), "-out", str(csr))
    sh("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
       "-extfile", str(ext), "-out", str(cert))
    return ca, cert, key


def make_client_cert(work: Path) -> tuple[Path, Path]:
    """A client certificate signed by ``make_ca_and_cert``'s CA in ``work``; returns (cert, key)."""
    key, csr, cert, ext = (work / n for n in ("client.key", "client.csr", "client.crt", "client.ext"))
    ext.write_text("extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n")
    for args in (["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=torchkiln test client", "-keyout", str(key),
                  "-out", str(csr)],
                 ["x509", "-req", "-in", str(csr), "-CA", str(work / "ca.crt"), "-CAkey", str(work / "ca.key"),
                  "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert)]):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    return cert, key


def start_registry(
    work: Path, *, tls: bool = False, user: str | None = None, password: str | None = None,
    reuse_env: str | None = "KILN_TEST_REGISTRY",
) -> Registry:
    """Start a registry on a free port of 127.0.0.1 (see the module docstring)."""
    if reuse_env and not tls and user is None and os.environ.get(reuse_env):
        reg = Registry(os.environ[reuse_env])
        if not reg.up():
            raise RuntimeError(f"{reuse_env}={reg.host} does not answer")
        return reg
    if not Path(REGISTRY_BIN).is_file():
        raise ServiceUnavailable(f"{REGISTRY_BIN} is not installed (Debian: apt-get install docker-registry)")
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    host = f"127.0.0.1:{port}"
    http: dict[str, object] = {"addr": host, "secret": base64.b64encode(os.urandom(12)).decode()}
    reg = Registry(host, tls=tls, user=user, password=password, root=work)
    if tls:
        if os.geteuid() != 0:
            raise ServiceUnavailable("the daemon trusts a registry CA through /etc/docker/certs.d: needs root")
        ca, cert, key = make_ca_and_cert(work / "tls")
        http["tls"] = {"certificate": str(cert), "key": str(key)}
        reg.ca = ca
        reg.certs_dir = CERTS_D / host
        reg.certs_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ca, reg.certs_dir / "ca.crt")
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "info", "fields": {"service": "registry"}},
        "storage": {"filesystem": {"rootdirectory": str(work / "data")}, "delete": {"enabled": True}},
        "http": http,
    }
    if user is not None:
        (work / "htpasswd").write_text(_htpasswd(user, password or ""))
        config["auth"] = {"htpasswd": {"realm": "kiln-test", "path": str(work / "htpasswd")}}
    (work / "config.yml").write_text(json.dumps(config, indent=1))  # JSON is YAML
    log = work / "registry.log"
    with log.open("wb") as out:
        reg.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(work / "config.yml")], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait(reg.up, f"docker-registry on {host}", log, timeout=30)
    except BaseException:
        reg.stop()
        raise
    return reg


# -- a second docker daemon -----------------------------------------------------------------------


@dataclass
class Daemon:
    """A running dockerd: ``host`` is its ``unix://`` address, ``env`` what a client needs to reach it."""

    host: str
    root: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: the daemon's TLS listener (``tcp://127.0.0.1:PORT``, client certificates required) and the
    #: client's files for it (``ca``, ``cert``, ``key``): what ``docker context create --docker`` takes
    tls_host: str | None = None
    tls_files: dict[str, Path] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["/usr/bin/docker", *args], env={**os.environ, **self.env}, text=True,
                              capture_output=True, check=check)

    def up(self) -> bool:
        r = subprocess.run(["/usr/bin/docker", "version", "--format", "{{.Server.Version}}"],
                           env={**os.environ, **self.env}, capture_output=True, text=True)
        return r.returncode == 0 and bool(r.stdout.strip())

    bridge: str | None = None

    def stop(self) -> None:
        _stop(self.proc, timeout=30)
        if self.bridge is not None:
            subprocess.run(["ip", "link", "delete", self.bridge, "type", "bridge"], capture_output=True)
        if self.root is not None:
            # overlay mounts and containerd state: the daemon unmounted them on SIGTERM
            subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)


def _make_bridge(name: str) -> str:
    """A Linux bridge of its own for a second daemon (``ip link``), with a free private /24."""
    if shutil.which("ip") is None:
        raise ServiceUnavailable("the ip command is missing (Debian: apt-get install iproute2)")
    bridge = ("kb" + "".join(c for c in name if c.isalnum()))[:15]
    subprocess.run(["ip", "link", "delete", bridge, "type", "bridge"], capture_output=True)
    used = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    third = next((n for n in range(200, 250) if f"10.231.{n}." not in used), None)
    if third is None:
        raise ServiceUnavailable("no free 10.231.x.0/24 subnet for a second daemon's bridge")
    for cmd in (["ip", "link", "add", "name", bridge, "type", "bridge"],
                ["ip", "addr", "add", f"10.231.{third}.1/24", "dev", bridge],
                ["ip", "link", "set", bridge, "up"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["ip", "link", "delete", bridge, "type", "bridge"], capture_output=True)
            raise ServiceUnavailable(f"could not make the bridge {bridge}: {r.stderr.strip()}")
    return bridge


def start_daemon(work: Path, *, reuse_env: str | None = "KILN_TEST_DOCKER_HOST") -> Daemon:
    """Start a second dockerd whose whole state lives under ``work`` (see the module docstring).

    ``work`` should be a short path: containerd's sockets live under the exec root and unix socket
    paths are limited to 108 bytes.
    """
    if reuse_env and os.environ.get(reuse_env):
        d = Daemon(os.environ[reuse_env])
        if not d.up():
            raise RuntimeError(f"{reuse_env}={d.host} does not answer")
        return d
    dockerd = shutil.which("dockerd")
    if dockerd is None or not Path("/usr/bin/docker").is_file():
        raise ServiceUnavailable("dockerd is not installed (Debian: apt-get install docker.io)")
    if os.geteuid() != 0:
        raise ServiceUnavailable("a second Docker daemon needs root")
    work.mkdir(parents=True, exist_ok=True)
    (work / "daemon.json").write_text("{}\n")  # not the machine's /etc/docker/daemon.json
    sock = work / "docker.sock"
    d = Daemon(f"unix://{sock}", root=work)
    name = work.name
    d.bridge = _make_bridge(name)
    cmd = [
        dockerd, "--config-file", str(work / "daemon.json"),
        "--data-root", str(work / "data"), "--exec-root", str(work / "exec"),
        "-H", f"unix://{sock}", "--pidfile", str(work / "docker.pid"),
        f"--bridge={d.bridge}", "--iptables=false", "--ip-masq=false",
        # a containerd of the machine (systemd installs) is shared: keep this daemon's state apart
        "--containerd-namespace", f"{name}", "--containerd-plugins-namespace", f"{name}-plugins",
    ]
    try:  # a TLS listener on loopback too (mutual TLS, as a remote builder is reached)
        ca, cert, key = make_ca_and_cert(work / "tls")
        client_cert, client_key = make_client_cert(work / "tls")
    except (ServiceUnavailable, subprocess.CalledProcessError):
        pass
    else:
        d.tls_host = f"tcp://127.0.0.1:{free_port()}"
        d.tls_files = {"ca": ca, "cert": client_cert, "key": client_key}
        cmd += ["-H", d.tls_host, "--tlsverify", "--tlscacert", str(ca), "--tlscert", str(cert), "--tlskey", str(key)]
    log = work / "dockerd.log"
    with log.open("wb") as out:
        d.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    try:
        _wait(d.up, "the second dockerd", log, timeout=90)
    except BaseException:
        d.stop()
        raise
    return d
