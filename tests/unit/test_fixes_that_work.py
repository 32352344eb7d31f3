"""Issue #30: series versions, Python per base distribution, min_driver errors that name the affected targets,
source-build fixes only where the toolkit knows the arch, platform variants, long compile steps announced."""

import pytest

from torchkiln.errors import ExitCode, ResolveError
from torchkiln.knowledge import load_knowledge
from torchkiln.resolve import resolve
from torchkiln.resolve.base import distro_of
from torchkiln.spec import parse_spec


def plan(**tables):
    return resolve(parse_spec({"image": {"name": "acme/t"}, **tables}), load_knowledge())  # image= overrides


def fails(**tables) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        plan(**tables)
    assert e.value.exit_code == ExitCode.RESOLVE
    return e.value


def test_a_series_means_its_newest_patch_and_the_plan_says_so() -> None:
    p = plan(torch={"version": "2.9"}, gpu={"targets": ["H100"]})
    assert p.torch.version == "2.9.1"
    why = next(d for d in p.decisions if d.topic == "torch").why
    assert "2.9" in why and "newest" in why
    assert plan(torch={"version": "2.12"}, python={"version": "3.13t"}).torch.version == "2.12.0"  # 2.12.1 has none
    e = fails(torch={"version": "2.99"})
    assert "not a release torchkiln knows" in e.message


@pytest.mark.parametrize("image, name", [
    ("nvidia/cuda:12.6.3-runtime-ubuntu22.04", "Ubuntu 22.04 (jammy)"),
    ("ubuntu:24.04", "Ubuntu 24.04 (noble)"),
    ("debian:bookworm-slim", "Debian 12 (bookworm)"),
    ("kiln-base:bookworm-arm64", "Debian 12 (bookworm)"),
    ("registry.example/acme/base:1", None),
])
def test_distribution_of_an_image(image: str, name: str | None) -> None:
    d = distro_of(image)
    assert (d.name if d else None) == name


def test_ubuntu_22_04_apt_has_no_python_3_12() -> None:
    e = fails(torch={"version": "2.8.0"}, python={"version": "3.12"},
              base={"image": "nvidia/cuda:12.8.1-runtime-ubuntu22.04", "python": "apt"})
    assert "Ubuntu 22.04" in e.message and "3.10, 3.11" in e.message and "python3.12" in e.message
    assert {"python": {"version": "3.10"}} in e.fixes
    ok = plan(torch={"version": "2.8.0"}, python={"version": "3.12"},
              base={"image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04", "python": "apt"})
    assert ok.apt_packages[0] == "python3.12"
    assert plan(torch={"version": "2.8.0"}, python={"version": "3.11"},
                base={"image": "debian:bookworm", "python": "apt"}).python_exe == "python3.11"
    e = fails(torch={"version": "2.8.0"}, python={"version": "3.12"},
              base={"image": "debian:bookworm", "python": "apt"})
    assert "Debian 12 (bookworm)" in e.message


def test_suggested_cuda_runtime_bases_keep_a_python_their_archive_has() -> None:
    """A fix that puts the spec on nvidia/cuda:*-ubuntu22.04 with python = "apt" is not offered for 3.12."""
    e = fails(torch={"version": "2.8.0", "cuda": "12.8"}, python={"version": "3.12"}, gpu={"targets": ["H100"]},
              extensions=[{"name": "flash-attn", "version": "2.8.3", "prebuilt": False}])
    assert all("ubuntu22.04" not in f.get("base", {}).get("image", "") for f in e.fixes)


def test_min_driver_error_names_the_affected_target_and_what_the_others_keep() -> None:
    e = fails(torch={"version": "2.9.1"}, gpu={"targets": ["RTX 5090", "T4", "A100"], "min_driver": "535.104"})
    assert "RTX 5090 needs driver 570.26" in e.message
    assert "only RTX 5090 cannot run on driver 535.104" in e.message and "T4, A100 keep running it" in e.message
    assert {"gpu": {"targets": ["T4", "A100"]}} in e.fixes and {"gpu": {"min_driver": "570.26"}} in e.fixes


def test_thor_on_cu128_offers_no_source_build_that_cannot_compile_sm_110() -> None:
    e = fails(torch={"version": "2.9.1", "cuda": "12.8"}, gpu={"targets": ["Jetson Thor"]})
    assert "no kernel image for Jetson Thor" in e.message
    assert all(f.get("torch", {}).get("source") != "git" or f["torch"]["cuda"] >= "13.0" for f in e.fixes)
    assert {"torch": {"version": "2.9.1", "cuda": "13.0"}} in e.fixes
    e = fails(torch={"version": "2.9.1", "cuda": "12.8", "source": "git"}, gpu={"targets": ["Jetson Thor"]})
    assert "first known to CUDA 13.0" in e.message


def test_every_offered_fix_resolves() -> None:
    kb = load_knowledge()
    cases = [
        dict(torch={"version": "2.6.0", "cuda": "12.4"}, gpu={"targets": ["GH200"]}),
        dict(torch={"version": "2.9.1", "cuda": "12.8"}, gpu={"targets": ["Jetson Thor"]}),
        dict(torch={"version": "2.13.0"}, python={"version": "3.13t"}),
        dict(torch={"cuda": "13.0"}, gpu={"targets": ["L4", "A100"], "min_driver": "535.104"}),
        dict(torch={"version": "2.8.0"}, python={"version": "3.12"},
             base={"image": "nvidia/cuda:12.8.1-runtime-ubuntu22.04", "python": "apt"}),
        dict(torch={"version": "2.9.1"}, gpu={"targets": ["RTX 5090", "T4"], "min_driver": "535.104"}),
    ]
    from torchkiln.resolve.ext import _patched

    for case in cases:
        spec = parse_spec({"image": {"name": "acme/t"}, **case})
        with pytest.raises(ResolveError) as e:
            resolve(spec, kb)
        assert e.value.fixes, case
        for fix in e.value.fixes:
            resolve(_patched(spec, fix), kb)  # raises if a fix does not work


@pytest.mark.parametrize("version, cudas", [("2.6.0", {"12.6"}), ("2.7.1", {"12.8"}), ("2.14.1", {"12.6", "13.0"})])
def test_auto_never_names_an_aarch64_variant_without_wheels(version: str, cudas: set[str]) -> None:
    for driver in ("535.104", "580.65.06", None):
        p = plan(torch={"version": version}, gpu={"targets": ["GH200"], **({"min_driver": driver} if driver else {})})
        assert p.torch.cuda in cudas


def test_auto_for_2_14_0_is_never_cu129() -> None:
    for driver in ("535.104", "575.51.03", None):
        p = plan(torch={"version": "2.14.0"}, gpu={"targets": ["H100"], **({"min_driver": driver} if driver else {})})
        assert p.torch.variant in {"cu126", "cu130"}


def test_long_compile_steps_are_found() -> None:
    from torchkiln.cli.build import long_steps

    p = plan(torch={"version": "2.9.1", "cuda": "13.0"}, gpu={"targets": ["H100", "A100"]},
             extensions=[{"name": "flash-attn", "version": "2.8.3", "prebuilt": False}])
    slow = long_steps(p, cores=2, mem_gib=8)
    assert [e.what for e in slow] == ["flash-attn"] and slow[0].wall_minutes > 10
    assert long_steps(p, cores=2, mem_gib=8, minutes=10**6) == []
    assert long_steps(plan(torch={"version": "2.9.1"}), cores=2, mem_gib=8) == []


def test_python_3_12_gets_an_ubuntu_24_04_cuda_base_fix() -> None:
    e = fails(torch={"version": "2.8.0", "cuda": "12.8"}, python={"version": "3.12"}, gpu={"targets": ["H100"]},
              extensions=[{"name": "flash-attn", "version": "2.8.3", "prebuilt": False}])
    assert any(f.get("base", {}).get("image", "").endswith("-runtime-ubuntu24.04") for f in e.fixes)


def test_platform_moves_are_offered_only_where_they_resolve() -> None:
    e = fails(image={"name": "acme/t", "platform": "linux/amd64"}, torch={"version": "2.5.1"},
              gpu={"targets": ["GH200"]})
    # 2.5.1 has no aarch64 CUDA wheels: the bare move would not resolve, the move with the nearest torch does
    assert {"image": {"platform": "linux/arm64"}} not in e.fixes
    assert {"image": {"platform": "linux/arm64"}, "torch": {"version": "2.6.0", "cuda": "12.6"}} in e.fixes
    e = fails(image={"name": "acme/t", "platform": "linux/amd64"}, torch={"version": "2.9.1"},
              gpu={"targets": ["GH200"]})
    assert e.fixes[0] == {"image": {"platform": "linux/arm64"}}


def test_the_build_warns_before_a_long_compile(tmp_path, capsys) -> None:
    from torchkiln.cli import build as cli_build

    spec = tmp_path / "kiln.toml"
    spec.write_text('[image]\nname = "acme/t"\n[torch]\nversion = "2.9.1"\ncuda = "13.0"\n[gpu]\n'
                    'targets = ["H100", "A100"]\n[[extensions]]\nname = "flash-attn"\nversion = "2.8.3"\n'
                    "prebuilt = false\n")
    cli_build._warn_long_steps(spec, None, ask=False)
    err = capsys.readouterr().err
    assert "flash-attn" in err and "--yes" in err and "CPU-minutes" in err
    quick = tmp_path / "quick.toml"
    quick.write_text('[image]\nname = "acme/t"\n[torch]\nversion = "2.9.1"\n')
    cli_build._warn_long_steps(quick, None, ask=False)
    assert capsys.readouterr().err == ""


def test_resolve_table_says_series_free_threaded_and_forward_compat(tmp_path, capsys, monkeypatch) -> None:
    from torchkiln.cli import main

    monkeypatch.setenv("COLUMNS", "300")
    cases = {
        "series.toml": ('[torch]\nversion = "2.9"\n', "names the 2.9 series"),
        "ft.toml": ('[torch]\nversion = "2.9.1"\n[python]\nversion = "3.14t"\n', "free-threaded, installed by uv"),
        "fc.toml": ('[torch]\nversion = "2.14.1"\n[gpu]\ntargets = ["H100"]\nmin_driver = "535.104"\n'
                    "forward_compat = true\n", "cuda-compat from nvidia/cuda:13.0.0-base-ubuntu24.04"),
    }
    for name, (body, want) in cases.items():
        spec = tmp_path / name
        spec.write_text('[image]\nname = "acme/t"\n' + body)
        assert main(["resolve", str(spec)]) == 0
        out = capsys.readouterr().out
        assert want in " ".join(out.replace("│", " ").split()), out


def test_torchvision_pairs_of_every_patch_of_2_12_and_2_14() -> None:
    """torchvision 0.27.1 requires torch==2.12.1 and 0.29.0 torch==2.14.0 (their PyPI wheels' METADATA)."""
    assert plan(torch={"version": "2.12.1", "packages": ["torchvision"]}).torch.companions == ("torchvision==0.27.1",)
    assert plan(torch={"version": "2.14.0", "packages": ["torchvision"]}).torch.companions == ("torchvision==0.29.0",)
