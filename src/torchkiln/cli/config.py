"""`kiln config`: the effective settings and where each came from; `kiln config set|unset KEY` writes the
user file (see ``torchkiln.settings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from torchkiln.cli import app
from torchkiln.cli._common import JsonOpt, console, print_json, spec_path
from torchkiln.plan import BuildPlan
from torchkiln.settings import KEYS, Settings, describe_default, effective, load_user, set_values, write_user

config_app = typer.Typer(
    name="config",
    help="Settings of this machine (base image, package sources, engine, builders, registry): flags > KILN_* "
         "environment > the spec > the user file > defaults.",
    no_args_is_help=False,
    invoke_without_command=True,
)
app.add_typer(config_app, name="config")


def command_settings(spec: Path | None = None, **flags: Any) -> Settings:
    """The settings a command runs with: its flags over the environment, the spec (when it exists and
    parses; a broken spec is the command's own error to report) and the user file."""
    from torchkiln.spec import load_spec

    loaded, origin = None, "kiln.toml"
    if spec is not None:
        p = spec_path(spec)
        if p.is_file():
            loaded, origin = load_spec(p), str(p)
    return effective(flags=flags, spec=loaded, spec_origin=origin)


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return " ".join(value) if value else "-"
    return str(value)


@config_app.callback()
def config_cmd(
    ctx: typer.Context,
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="Show the settings as a command on this spec sees them (its \\[base] and "
                                    "\\[sources] are the project layer).", show_default=False),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Print every effective setting and where it came from: flag, env (KILN_*), project (the spec),
    user (the settings file) or default."""
    if ctx.invoked_subcommand is not None:
        return
    s = command_settings(spec)
    if json:
        print_json(s.to_dict())
        return
    console.print(f"settings file: {escape(str(s.user_file))}" + ("" if s.user_file.exists() else " (none yet)"),
                  highlight=False)
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("key", "value", "from", "where"):
        table.add_column(col)
    for item in s.items:
        value = _shown(item.value)
        if item.origin == "default" and describe_default(item.key):
            value = f"[dim]{escape(describe_default(item.key))}[/dim]"
        else:
            value = escape(value)
        table.add_row(item.key, value, item.origin, escape(item.where))
    console.print(table)
    console.print("change one: kiln config set KEY VALUE · remove one: kiln config unset KEY", highlight=False)


@config_app.command("set")
def set_cmd(
    key: Annotated[str, typer.Argument(help="A setting: " + ", ".join(k.name for k in KEYS) + ".",
                                       show_default=False)],
    values: Annotated[list[str], typer.Argument(help="Its value (several, or comma-separated, for a list).",
                                                show_default=False)],
    json: JsonOpt = False,
) -> None:
    """Write one setting into the user file (created if needed; replaced whole, never half-written)."""
    current, path = load_user()
    updated = set_values(current, key, values, f"kiln config set {key}")
    write_user(updated, path)
    value = updated.model_dump()
    for part in key.split("."):
        value = value[part]
    if json:
        print_json({"key": key, "value": value, "file": str(path)})
        return
    console.print(f"[bold green]set[/bold green] {escape(key)} = {escape(_shown(value))} in {escape(str(path))}",
                  highlight=False)


@config_app.command("unset")
def unset_cmd(
    key: Annotated[str, typer.Argument(help="The setting to remove from the user file.", show_default=False)],
    json: JsonOpt = False,
) -> None:
    """Remove one setting from the user file (its default, or a lower layer, applies again)."""
    current, path = load_user()
    updated = set_values(current, key, None, f"kiln config unset {key}")
    if updated != current:
        write_user(updated, path)
    if json:
        print_json({"key": key, "file": str(path)})
        return
    console.print(f"[bold green]unset[/bold green] {escape(key)} in {escape(str(path))}", highlight=False)


def engine_setting(flag: str | None) -> str | None:
    """The engine a command uses: ``--engine``, else ``KILN_ENGINE``, else the user file's ``engine``."""
    if flag:
        return flag
    return effective().engine


def with_base_setting(plan: BuildPlan, spec: Path) -> BuildPlan:
    """The plan on the base the settings name (a flag's or ``KILN_BASE``, or the user file's ``base`` for a
    spec without ``[base] image``), as ``kiln build`` builds it, with a decision that says so; a base
    whose own torch the plan keeps is never replaced."""
    import dataclasses

    from torchkiln.building.emulation import base_for_platform
    from torchkiln.plan import Decision

    settings = command_settings(spec)
    base = settings.base_override
    if not base or plan.torch.image is not None:
        return plan
    where = settings["base"].where
    decision = Decision("base image (settings)", base_for_platform(base, plan.platform),
                        f"this machine's base setting replaces {plan.base_image} (kiln config; "
                        "kiln build and kiln lock build on it too)", where)
    return dataclasses.replace(plan, base_image=base_for_platform(base, plan.platform),
                               decisions=(*plan.decisions, decision))
