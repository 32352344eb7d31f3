"""Package sources: layers and precedence, pip's configuration, uv.toml, wheel folders, local index servers."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from torchkiln.building.sources import (
    SECRET_CA,
    SECRET_UV,
    SourceLayer,
    Sources,
    check_ca_bundle,
    check_reachable,
    layer_from_env,
    layer_from_flags,
    link_wheels,
    mask_url,
    merge,
    parse_pip_config_list,
    prepare,
    render_uv_toml,
)
from torchkiln.errors import SourceError

PIP_CONFIG = """\
:env:.cert='/etc/ssl/certs/ca.pem'
:env:.find-links='/srv/wheels'
global.cert='/etc/ssl/certs/other.pem'
global.extra-index-url='file:///srv/pypi/simple file:///srv/more/simple'
global.find-links='/srv/global-wheels'
global.index-url='https://mirror.invalid/simple'
install.index-url='https://install.invalid/simple'
"""

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_pip_config_env_beats_install_beats_global() -> None:
    layer = parse_pip_config_list(PIP_CONFIG)
    assert layer.origin == "pip config"
    assert layer.ca_bundle == "/etc/ssl/certs/ca.pem"
    assert layer.find_links == ("/srv/wheels",)
    assert layer.index_url == "https://install.invalid/simple"
    assert layer.extra_index_urls == ("file:///srv/pypi/simple", "file:///srv/more/simple")
    assert layer.index_strategy == "unsafe-best-match"  # pip's behaviour across indexes


def test_env_layer_and_validation(tmp_path: Path) -> None:
    env = {
        "KILN_INDEX_URL": "https://idx.invalid/simple",
        "KILN_EXTRA_INDEX_URL": "https://a.invalid/simple  https://b.invalid/simple",
        "KILN_FIND_LINKS": "wheels",
        "KILN_NETWORK": "host",
        "KILN_CA_BUNDLE": "ca.pem",
    }
    layer = layer_from_env(env, tmp_path)
    assert layer.extra_index_urls == ("https://a.invalid/simple", "https://b.invalid/simple")
    merged = merge(layer)
    assert merged.find_links == (str(tmp_path / "wheels"),)
    assert merged.ca_bundle == str(tmp_path / "ca.pem")
    assert merged.network == "host"
    with pytest.raises(SourceError, match="network"):
        layer_from_env({"KILN_NETWORK": "bridge"})
    with pytest.raises(SourceError, match="index strategy"):
        layer_from_env({"KILN_INDEX_STRATEGY": "best"})


def test_precedence_is_per_field_and_lists_do_not_concatenate(tmp_path: Path) -> None:
    flags = layer_from_flags(find_links=["/flag/wheels"])
    env = SourceLayer("env", index_url="https://env.invalid/simple", find_links=("/env/wheels",))
    spec = SourceLayer(
        "spec", index_url="https://spec.invalid/simple", torch_index="https://torch.invalid/whl/cu130",
        extra_index_urls=("./local/simple",), base_dir=tmp_path,
    )
    s = merge(flags, env, spec)
    assert s.find_links == ("/flag/wheels",)
    assert s.index_url == "https://env.invalid/simple"
    assert s.torch_index == "https://torch.invalid/whl/cu130"
    assert s.extra_index_urls == (str(tmp_path / "local" / "simple"),)
    assert dict(s.origins) == {
        "find_links": "flag", "index_url": "env", "torch_index": "spec", "extra_index_urls": "spec",
    }
    assert s.network == "default"


def test_mask_url() -> None:
    assert mask_url("https://bob:s3cret@idx.invalid:8443/simple") == "https://bob:***@idx.invalid:8443/simple"
    assert mask_url("https://idx.invalid/simple") == "https://idx.invalid/simple"
    s = Sources(index_url="https://bob:s3cret@idx.invalid/simple")
    assert "s3cret" not in str(s.to_dict())


def test_uv_toml_is_valid_toml_with_the_settings() -> None:
    text = render_uv_toml(
        index_url='https://idx.invalid/simple?a="b"',
        extra_index_urls=["https://torch.invalid/whl/cu130", "http://127.0.0.1:8000/simple/"],
        find_links=["/kiln/wheels"],
        index_strategy="unsafe-best-match",
    )
    data = tomllib.loads(text)
    assert data == {
        "index-url": 'https://idx.invalid/simple?a="b"',
        "extra-index-url": ["https://torch.invalid/whl/cu130", "http://127.0.0.1:8000/simple/"],
        "find-links": ["/kiln/wheels"],
        "index-strategy": "unsafe-best-match",
    }


def test_ca_bundle_checks(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        check_ca_bundle(str(tmp_path / "missing.pem"))
    der = tmp_path / "ca.cer"
    der.write_bytes(b"\x30\x82\x01\x0a")
    with pytest.raises(SourceError, match="no PEM certificate"):
        check_ca_bundle(str(der))
    pem = tmp_path / "ca.pem"
    pem.write_text(PEM)
    assert check_ca_bundle(str(pem)) == pem


def test_link_wheels_replaces_old_files_and_keeps_others(tmp_path: Path) -> None:
    a, b, dest = tmp_path / "a", tmp_path / "b", tmp_path / "ctx" / ".kiln" / "wheels"
    a.mkdir()
    b.mkdir()
    dest.mkdir(parents=True)
    (dest / ".keep").write_text("")
    (dest / "stale-1.0-py3-none-any.whl").write_text("old")
    (a / "x-1.0-py3-none-any.whl").write_text("x")
    (a / "notes.txt").write_text("not a distribution")
    (b / "x-1.0-py3-none-any.whl").write_text("duplicate name: first folder wins")
    (b / "y-2.0.tar.gz").write_text("y")
    names = link_wheels([a, b], dest)
    assert names == ["x-1.0-py3-none-any.whl", "y-2.0.tar.gz"]
    assert sorted(p.name for p in dest.iterdir()) == [".keep", "x-1.0-py3-none-any.whl", "y-2.0.tar.gz"]
    assert (dest / "x-1.0-py3-none-any.whl").read_text() == "x"
    with pytest.raises(SourceError, match="does not exist"):
        link_wheels([tmp_path / "nope"], dest)


def _index_folder(root: Path) -> Path:
    simple = root / "simple"
    (simple / "demo").mkdir(parents=True)
    (root / "files").mkdir()
    (root / "files" / "demo-1.0-py3-none-any.whl").write_bytes(b"PK wheel bytes")
    (simple / "demo" / "index.html").write_text(
        '<a href="../../files/demo-1.0-py3-none-any.whl">demo-1.0-py3-none-any.whl</a>'
    )
    return simple


def test_prepare_serves_local_index_links_wheels_and_writes_secrets(tmp_path: Path) -> None:
    simple = _index_folder(tmp_path / "mirror")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_text("w")
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)
    ctx = tmp_path / "ctx"
    sources = merge(SourceLayer("flag", extra_index_urls=(simple.as_uri(),), find_links=(str(wheels),),
                                ca_bundle=str(ca)))
    with prepare(sources, ctx) as prepared:
        assert prepared.network == "host"  # a served folder needs host networking
        assert set(prepared.secrets) == {SECRET_UV, SECRET_CA}
        assert prepared.secrets[SECRET_CA] == ca
        uv_path = prepared.secrets[SECRET_UV]
        assert not uv_path.is_relative_to(ctx)  # secrets never live in the build context
        config = tomllib.loads(uv_path.read_text())
        assert config["find-links"] == ["/kiln/wheels"]
        (url,) = config["extra-index-url"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/simple/")
        page = urllib.request.urlopen(url + "demo/").read().decode()
        assert "demo-1.0-py3-none-any.whl" in page
        wheel = urllib.request.urlopen(url + "demo/../../files/demo-1.0-py3-none-any.whl").read()
        assert wheel == b"PK wheel bytes"
        assert (ctx / ".kiln" / "wheels" / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").exists()
        assert prepared.wheels == ("torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl",)
    assert not uv_path.exists()  # removed after the build
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)  # the server is gone


def test_prepare_without_sources_passes_no_secrets(tmp_path: Path) -> None:
    with prepare(Sources(), tmp_path / "ctx") as prepared:
        assert prepared.secrets == {}
        assert prepared.network == "default"


def test_unreachable_index_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"127\.0\.0\.1:1/simple/ cannot be reached"):
        check_reachable(["http://127.0.0.1:1/simple/"], None)


def test_tls_failure_names_the_ca_bundle() -> None:
    def probe(url: str, context: ssl.SSLContext) -> None:
        raise urllib.error.URLError(ssl.SSLCertVerificationError(1, "certificate verify failed: unable to get issuer"))

    with pytest.raises(SourceError) as info:
        check_reachable(["https://idx.invalid/simple/"], None, probe)
    assert "TLS verification failed" in info.value.message
    assert info.value.hint is not None and "--ca-bundle" in info.value.hint


def test_remote_index_is_probed_and_local_ones_are_not(tmp_path: Path) -> None:
    seen: list[str] = []

    def probe(url: str, context: ssl.SSLContext) -> None:
        seen.append(url)

    simple = _index_folder(tmp_path / "mirror")
    sources = merge(SourceLayer("flag", index_url="https://idx.invalid/simple", extra_index_urls=(str(simple),)))
    with prepare(sources, tmp_path / "ctx", probe=probe):
        pass
    assert seen == ["https://idx.invalid/simple"]


def test_unloadable_ca_bundle_is_a_source_error(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(PEM)  # PEM armour around garbage
    with pytest.raises(SourceError, match="cannot be loaded"):
        check_reachable(["https://idx.invalid/simple/"], ca)


def test_missing_index_folder(tmp_path: Path) -> None:
    sources = merge(SourceLayer("flag", index_url=str(tmp_path / "nope" / "simple")))
    with pytest.raises(SourceError, match="index folder"):
        with prepare(sources, tmp_path / "ctx"):
            pass


def test_local_index_server_sends_whole_files_and_listings(tmp_path: Path) -> None:
    import os

    from torchkiln.building.sources import LocalIndexServer

    (tmp_path / "simple" / "big").mkdir(parents=True)
    data = os.urandom(3 * 1024 * 1024 + 17)  # not a multiple of any buffer size
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "big-1.0-py3-none-any.whl").write_bytes(data)
    server = LocalIndexServer(tmp_path)
    try:
        for _ in range(2):  # the same file twice: each response is complete and the connection clean
            with urllib.request.urlopen(f"{server.url}/files/big-1.0-py3-none-any.whl", timeout=10) as r:
                assert r.headers["Content-Length"] == str(len(data))
                assert r.read() == data
        with urllib.request.urlopen(f"{server.url}/simple/", timeout=10) as r:
            assert b'href="big/"' in r.read()  # a folder listing (a flat find-links page) still works
    finally:
        server.close()
