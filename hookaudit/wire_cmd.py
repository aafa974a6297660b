"""`hookaudit wire AGENT`: write an agent's hook configuration for one data dir.

Example:
    $ hookaudit wire gemini-cli --data-dir /var/lib/hookaudit --print
"""

from __future__ import annotations

from pathlib import Path

import click

from hookaudit.options import data_dir_option, fail
from ingest.wire.agents import LAYOUTS

__all__ = ["wire_cmd"]

_AGENTS = (*LAYOUTS, "opencode", "cline")
_NAMES = sorted({*_AGENTS, *(a.replace("_", "-") for a in _AGENTS)})


@click.command("wire")
@click.argument("agent", type=click.Choice(_NAMES, case_sensitive=False))
@data_dir_option
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The home directory whose agent configuration to wire (default: yours).",
)
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Wire this project's configuration instead of the user's.",
)
@click.option(
    "--print", "print_only", is_flag=True, help="Show what would be written; write nothing."
)
def wire_cmd(
    agent: str, data_dir: Path, home: Path | None, project: Path | None, print_only: bool
) -> None:
    """Send every hook event of AGENT to hookaudit for --data-dir, enforcing and fail-closed.

    Writes the agent's own hook configuration (Claude Code: .claude/settings.json; Codex:
    .codex/hooks.json; Gemini CLI:
    .gemini/settings.json; Copilot CLI: .copilot/hooks/hookaudit.json; Qwen Code:
    .qwen/settings.json; OpenCode: a plugin in .config/opencode/plugin/; Cline: a file per
    event in .cline/hooks/), merged with the hooks
    already there: nothing of yours is dropped, and wiring again changes nothing. Tool calls
    and prompts wait for the policy's decision (`emit --wait --fail closed`); the other
    events are recorded.

    \b
    Example:
      hookaudit wire codex --data-dir ~/.local/share/hookaudit --print
      hookaudit wire gemini-cli --data-dir ~/.local/share/hookaudit --project .
    """
    from ingest.wire.agents import (
        WireError,
        config_path,
        hookaudit_command,
        plan,
        read_config,
        render,
        write,
    )

    agent = agent.lower().replace("-", "_")
    if home is not None and project is not None:
        raise click.UsageError("--home and --project: give one")
    if agent == "cline":
        _wire_cline(data_dir, home, project, print_only)
        return
    if agent == "opencode":
        _wire_opencode(data_dir, home, project, print_only)
        return
    path = config_path(agent, home=home, project=project)
    try:
        existing = read_config(path)
    except WireError as e:
        fail(str(e))
        return
    try:
        doc, events = plan(
            agent, existing, data_dir=data_dir.resolve(), hookaudit=hookaudit_command()
        )
    except WireError as e:
        fail(f"{path}: {e}")
        return
    if print_only:
        click.echo(f"# {path}")
        click.echo(render(doc), nl=False)
        return
    try:
        write(path, doc)
    except WireError as e:
        fail(str(e))
        return
    click.echo(f"wired {agent}: {', '.join(events)} -> hookaudit ({data_dir.resolve()})")
    click.echo(f"  in {path}")
    click.echo(f"note: {LAYOUTS[agent].notes}")


def _wire_cline(data_dir: Path, home: Path | None, project: Path | None, print_only: bool) -> None:
    from ingest.wire.agents import WireError, hookaudit_command
    from ingest.wire.cline import CLINE_NOTES, cline_dir, cline_files, write_files

    folder = cline_dir(home=home, project=project)
    try:
        files = cline_files(folder, data_dir=data_dir.resolve(), hookaudit=hookaudit_command())
        if print_only:
            for path, text in files.items():
                click.echo(f"# {path}")
                click.echo(text, nl=False)
            return
        write_files(files)
    except WireError as e:
        fail(str(e))
        return
    click.echo(
        f"wired cline: {', '.join(p.name for p in files)} -> hookaudit ({data_dir.resolve()})"
    )
    click.echo(f"  in {folder}")
    click.echo(f"note: {CLINE_NOTES}")


def _wire_opencode(
    data_dir: Path, home: Path | None, project: Path | None, print_only: bool
) -> None:
    from ingest.wire.agents import WireError, hookaudit_argv
    from ingest.wire.cline import write_files
    from ingest.wire.opencode import MARK, plugin, plugin_path

    path = plugin_path(home=home, project=project)
    text = plugin(hookaudit_argv(), data_dir.resolve())
    if print_only:
        click.echo(f"// {path}")
        click.echo(text, nl=False)
        return
    try:
        if path.exists() and MARK not in path.read_text(errors="replace"):
            raise WireError(f"{path}: a plugin that is not hookaudit's is there; merge it by hand")
        write_files({path: text})
    except (WireError, OSError) as e:
        fail(str(e))
        return
    click.echo(
        f"wired opencode: tool.execute.before/after, chat.message, session events -> hookaudit ({data_dir.resolve()})"
    )
    click.echo(f"  in {path}")
    click.echo(
        "note: OpenCode loads every plugin in ~/.config/opencode/plugin/ and the project's "
        ".opencode/plugin/; a denied call does not run and the model gets the reason."
    )
