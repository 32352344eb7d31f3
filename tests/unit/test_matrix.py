"""[matrix]: strict validation, GitHub Actions' include/exclude semantics, cells, tags (all pure)."""

from __future__ import annotations

from typing import Any

import pytest

from torchkiln.errors import ExitCode, SpecError
from torchkiln.knowledge import load_knowledge
from torchkiln.matrix import (
    cell_tags,
    combinations,
    expand,
    manifest_groups,
    resolve_matrix,
    torch_layer_key,
)
from torchkiln.spec import parse_spec


def spec(matrix: dict[str, Any], **tables: Any) -> Any:
    return parse_spec({"image": {"name": "acme/t"}, "torch": {"cuda": "cpu"}, **tables, "matrix": matrix})


def tagged(s: Any) -> Any:
    return cell_tags(s, resolve_matrix(expand(s), load_knowledge()))


# -- GitHub Actions' documented examples ------------------------------------------------------------


def test_include_follows_githubs_documented_example() -> None:
    # "Expanding or adding matrix configurations" in GitHub's workflow syntax docs, value for value
    got = combinations(
        [("fruit", ["apple", "pear"]), ("animal", ["cat", "dog"])], [],
        [{"color": "green"}, {"color": "pink", "animal": "cat"}, {"fruit": "apple", "shape": "circle"},
         {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}])
    assert got == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},  # never merged into the include-made {fruit: banana}
    ]


def test_exclude_matches_partially_as_in_githubs_example() -> None:
    axes = [("os", ["macos", "windows"]), ("version", ["12", "14", "16"]), ("environment", ["staging", "production"])]
    got = combinations(axes, [{"os": "macos", "version": "12", "environment": "production"},
                              {"os": "windows", "version": "16"}], [])
    assert len(got) == 12 - 1 - 2
    assert {"os": "windows", "version": "16", "environment": "staging"} not in got
    assert {"os": "macos", "version": "12", "environment": "staging"} in got


def test_includes_run_after_excludes_and_may_bring_an_excluded_combination_back() -> None:
    got = combinations([("a", ["1", "2"])], [{"a": "2"}], [{"a": "2", "b": "x"}])
    assert got == [{"a": "1"}, {"a": "2", "b": "x"}]


def test_include_may_overwrite_what_an_earlier_include_added_but_never_an_axis_value() -> None:
    got = combinations([("a", ["1", "2"])], [], [{"b": "x"}, {"a": "1", "b": "y"}, {"a": "3", "b": "z"}])
    assert got == [{"a": "1", "b": "y"}, {"a": "2", "b": "x"}, {"a": "3", "b": "z"}]


# -- cells ------------------------------------------------------------------------------------------


def test_cells_are_whole_specs_in_axis_order_first_axis_slowest() -> None:
    s = spec({"python": ["3.11", "3.12"], "torch": ["2.13.0", "2.12.0"],
              "exclude": [{"torch": "2.12.0", "python": "3.12"}],
              "include": [{"python": "3.12", "pip": ["six==1.16.0"]}]},
             packages={"pip": ["numpy==2.3.5"]})
    cells = expand(s)
    assert [(c.spec.python.version, c.spec.torch.version) for c in cells] == [
        ("3.11", "2.13.0"), ("3.11", "2.12.0"), ("3.12", "2.13.0")]
    assert cells[2].spec.packages.pip == ["numpy==2.3.5", "six==1.16.0"]  # appended to the spec's own
    assert cells[0].spec.packages.pip == ["numpy==2.3.5"]
    assert all(c.spec.matrix is None for c in cells)
    assert cells[2].label == "torch=2.13.0 python=3.12 pip=[six==1.16.0]"


def test_a_spec_without_matrix_is_one_cell() -> None:
    s = parse_spec({"image": {"name": "acme/t"}})
    (cell,) = expand(s)
    assert cell.spec is s and cell.values == ()


def test_axes_override_their_fields_and_normalise_like_them() -> None:
    s = spec({"cuda": ["cu126", "13.0"], "gpu": [["H100"], ["A100", "L4"]], "platform": ["linux/arm64"]})
    cells = expand(s)
    assert {c.spec.torch.cuda for c in cells} == {"12.6", "13.0"}
    assert cells[1].spec.gpu.targets == ["A100", "L4"] and cells[0].spec.image.platform == "linux/arm64"


@pytest.mark.parametrize(
    ("matrix", "needle"),
    [
        ({"pyton": ["3.11"]}, r"unknown key 'pyton' in \[matrix\]\. Did you mean 'python'"),
        ({"python": ["3.11"], "include": [{"pyton": "3.12"}]},
         r"unknown key 'pyton' in \[matrix\] include\[1\]\. Did you mean 'python'"),
        ({"python": ["3.l1"]}, r"python = '3.l1': must be a Python minor version"),
        ({"python": ["3.11", "3.11"]}, "lists '3.11' more than once"),
        ({"cuda": ["cu126", "12.6"]}, "lists '12.6' more than once"),  # the same variant, two spellings
        ({"python": []}, "lists no value"),
        ({}, "at least one axis"),
        ({"gpu": [["A100"], []]}, "needs at least one GPU"),
        ({"pip": [["torch==2.1"]]}, "managed by torchkiln"),
        ({"platform": ["linux/s390x"]}, "'linux/amd64' or 'linux/arm64'"),
        ({"include": [{}]}, r"include\[1\]: an entry needs at least one of"),
        ({"python": ["3.11"], "include": [{"python": 3.12}]}, r"write it in quotes \(\"3.12\"\)"),
        ({"python": ["3.11"], "exclude": [{"torch": "2.13.0"}]}, r"exclude\[1\] names 'torch', which is not an axis"),
        ({"python": ["3.11", "3.12"], "exclude": [{"python": "3.13"}]}, "matches no combination"),
        ({"python": ["3.11"], "exclude": [{"python": "3.11"}]}, "leaves no combination"),
    ],
)
def test_bad_matrices_are_spec_errors_naming_the_place(matrix: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecError, match=needle) as e:
        expand(spec(matrix))
    assert e.value.exit_code == ExitCode.SPEC and "kiln.toml" in e.value.message


def test_a_cell_that_breaks_a_cross_field_rule_names_the_cell() -> None:
    # source = "git" needs a CUDA version: the cell with cuda = "cpu" breaks it
    s = parse_spec({"image": {"name": "a"}, "torch": {"version": "2.5.1", "cuda": "12.4", "source": "git"},
                    "matrix": {"cuda": ["12.4", "cpu"]}})
    with pytest.raises(SpecError, match=r"\[matrix\] cell 2 \(cuda=\"cpu\"\)"):
        expand(s)


# -- resolving, tags, manifests ---------------------------------------------------------------------


def test_impossible_cells_keep_their_reason_and_fix() -> None:
    cells = tagged(spec({"python": ["3.11", "3.7"]}))
    ok, bad = cells
    assert ok.ok and ok.image == f"acme/t:torch{ok.plan.torch.version}-cpu-py3.11"
    assert not bad.ok and bad.error is not None and "3.7" in bad.error.message and bad.error.hint
    assert bad.to_dict()["error"]["exit_code"] == ExitCode.RESOLVE


def test_tags_name_torch_variant_python_and_only_the_axes_that_vary_beyond() -> None:
    s = spec({"torch": ["2.13.0"], "pip": [["six==1.16.0"], ["six==1.17.0", "attrs"]]}, image={"name": "acme/t", "tag": "v1"})
    assert [c.tag for c in tagged(s)] == ["v1-torch2.13.0-cpu-py3.11-pip-six1.16.0",
                                          "v1-torch2.13.0-cpu-py3.11-pip-six1.17.0-attrs"]


def test_the_tag_comes_from_the_resolved_plan_so_two_spellings_of_one_release_collide() -> None:
    with pytest.raises(SpecError, match=r"cells 1 .* and 2 .* would both be acme/t:torch2.13.0-cpu-py3.11"):
        tagged(spec({"torch": ["2.13.0", "==2.13.0"]}))


def test_cells_that_differ_only_by_platform_share_a_manifest() -> None:
    s = parse_spec({"image": {"name": "reg.example:5000/acme/t"},
                    "torch": {"version": "2.13.0", "cuda": "cpu"},
                    "matrix": {"platform": ["linux/amd64", "linux/arm64"], "python": ["3.11", "3.12"]}})
    cells = tagged(s)
    assert [c.tag for c in cells] == ["torch2.13.0-cpu-py3.11-amd64", "torch2.13.0-cpu-py3.12-amd64",
                                      "torch2.13.0-cpu-py3.11-arm64", "torch2.13.0-cpu-py3.12-arm64"]
    groups = manifest_groups(cells)
    assert sorted(groups) == ["reg.example:5000/acme/t:torch2.13.0-cpu-py3.11",
                              "reg.example:5000/acme/t:torch2.13.0-cpu-py3.12"]
    assert {c.plan.platform for c in groups["reg.example:5000/acme/t:torch2.13.0-cpu-py3.11"]} == {
        "linux/amd64", "linux/arm64"}


def test_torch_layer_key_ignores_pip_packages_but_not_python() -> None:
    cells = tagged(spec({"python": ["3.11", "3.12"], "pip": [["six"], ["attrs"]]}))
    keys = [torch_layer_key(c.plan) for c in cells]
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]


# -- kiln resolve/explain --matrix ------------------------------------------------------------------

MATRIX_TOML = """\
[image]
name = "acme/t"
[torch]
version = "2.13.0"
cuda = "cpu"
[matrix]
python = ["3.11", "3.7"]
pip = [["six==1.16.0"], ["six==1.17.0"]]
"""


def run(capsys: Any, *args: str) -> tuple[int, str, str]:
    from torchkiln.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_resolve_matrix_lists_every_cell_and_refuses_impossible_ones(capsys: Any, tmp_path: Any) -> None:
    import json

    (tmp_path / "kiln.toml").write_text(MATRIX_TOML)
    code, out, err = run(capsys, "resolve", str(tmp_path), "--matrix")
    assert code == ExitCode.RESOLVE
    assert "acme/t:torch2.13.0-cpu-py3.11-pip-six1.17.0" in out and "4 cells, 2 impossible" in out
    assert "cell 3 (python=3.7 pip=[six==1.16.0])" in err and "fix:" in err and "--skip-impossible" in err
    code, out, _ = run(capsys, "resolve", str(tmp_path), "--matrix", "--skip-impossible", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["impossible"] == [3, 4] and [c["ok"] for c in data["cells"]] == [True, True, False, False]
    assert data["cells"][2]["error"]["error"] == "ResolveError" and data["cells"][2]["error"]["hint"]
    assert data["cells"][0]["plan"]["torch_requirement"] == "torch==2.13.0+cpu"


def test_explain_matrix_explains_each_cell(capsys: Any, tmp_path: Any) -> None:
    import json

    (tmp_path / "kiln.toml").write_text(MATRIX_TOML)
    code, out, _ = run(capsys, "explain", str(tmp_path), "--matrix", "--skip-impossible", "--json")
    assert code == 0
    cells = json.loads(out)["cells"]
    assert cells[0]["explain"]["image"] == "acme/t:torch2.13.0-cpu-py3.11-pip-six1.16.0"
    assert any(d["topic"] == "torch" for d in cells[0]["explain"]["decisions"])
    assert "no wheels for Python 3.7" in cells[3]["error"]["message"]
    code, out, err = run(capsys, "explain", str(tmp_path), "--matrix")
    assert code == ExitCode.RESOLVE and "impossible:" in out and "Why acme/t:torch2.13.0-cpu-py3.11" in out


def test_matrix_flag_on_a_spec_without_matrix_is_a_spec_error(capsys: Any, tmp_path: Any) -> None:
    (tmp_path / "kiln.toml").write_text('[image]\nname = "a"\n')
    code, _, err = run(capsys, "resolve", str(tmp_path), "--matrix")
    assert code == ExitCode.SPEC and "no [matrix] table" in err and "Traceback" not in err
