"""KL002's download sizes (torchkiln.lint.downloads over knowledge/wheels.toml, made from PyPI's JSON API)."""

from __future__ import annotations

from torchkiln.lint.downloads import closure, download, wheels


def test_the_table_has_the_packages_ml_images_install_with_sizes_of_the_right_order() -> None:
    table = wheels()
    assert len(table) > 800
    assert table["torch"].mb > 100 and table["torch"].deps and "filelock" in table["torch"].deps
    assert table["pip"].mb < 5 and table["einops"].mb < 1
    assert all(w.mb >= 0 and w.max_mb >= w.mb for w in table.values())
    # every dependency the table lists is a row of its own (the closure can always be summed)
    assert all(d in table for w in table.values() for d in w.deps or ())


def test_a_closure_is_unknown_for_a_package_the_table_lacks_or_one_built_from_an_sdist() -> None:
    assert closure(["requests"]) is not None and {"urllib3", "idna", "certifi"} <= (closure(["requests"]) or set())
    assert closure(["a-package-nobody-publishes"]) is None
    assert wheels()["flash-attn"].sdist and closure(["flash-attn"]) is None  # pip caches the wheel it builds


def test_what_the_image_has_is_not_counted_unless_upgraded_or_pinned_to_its_largest() -> None:
    full = download(["requests"], set())
    assert full is not None and full.named[0][0] == "requests"
    none = download(["requests"], closure(["requests"]) or set())
    assert none is not None and none.mb == 0
    upgraded = download(["requests"], closure(["requests"]) or set(), fresh=["requests"])
    assert upgraded is not None and upgraded.mb == wheels()["requests"].mb
    pinned = download(["torch"], set(), pinned=["torch"])
    latest = download(["torch"], set())
    assert pinned is not None and latest is not None and pinned.mb >= latest.mb


def test_a_package_built_for_one_torch_makes_the_download_unknown_where_torch_is_there() -> None:
    have = closure(["torch"]) or set()
    assert download(["torchaudio"], have) is None  # pip may replace the image's torch with the one it wants
    assert download(["torchaudio"], set()) is not None  # installed together: its torch is counted
