"""A task's solution as the scripted engine plays it: its commands, one by one where a
tool takes one command at a time, and the files it leaves, for an agent that only edits.

Bash is the parser: a run of lines is a whole command when `bash -n` reads it without
complaint (an open quote, `if`, `&&` or pipe is a syntax error at the end of the text; a
heredoc without its delimiter a warning), so heredocs, quotes, continuations and compound
commands are cut exactly where the shell would end them, never by a guess at its grammar.
The files come from running the solution once in a scratch bubblewrap sandbox laid out
like the local one (the task's environment/ in its workdir, the host's userland
read-only, no network) and comparing the workdir before and after.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from harbor_ray.errors import DatasetError
from harbor_ray.trials.environment_need import uploads_environment_dir
from harbor_ray.trials.sandbox.layout import (
    DEFAULT_WORKDIR,
    SANDBOX_PATH,
    Layout,
    init_argv,
    prepare_root,
)

__all__ = [
    "bash_reads_whole",
    "solution_edits",
    "solution_script",
    "split_commands",
    "typed_command",
]

# A solution is a few commands run once: far below this, which only stops a hung one.
_RUN_TIMEOUT_S = 120.0


def solution_script(task_dir: Path) -> str:
    """The task's `solution/solve.sh` as one shell command string: its shebang dropped,
    every other line (heredocs, comments inside them) kept as it is."""
    lines = (task_dir / "solution" / "solve.sh").read_text().splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    return "\n".join(lines).strip()


def bash_reads_whole(text: str) -> bool:
    """Whether bash reads `text` as complete commands: no syntax error and no warning
    (a heredoc still open at the end is only a warning). extglob on, as a script that
    turns it on would parse its later lines."""
    checked = subprocess.run(
        ["bash", "-O", "extglob", "-n"], input=text.encode(), capture_output=True, check=False
    )
    return checked.returncode == 0 and not checked.stderr


def split_commands(script: str, whole: Callable[[str], bool] = bash_reads_whole) -> tuple[str, ...]:
    """`script`'s top-level commands, each a run of its lines that `whole` reads as
    complete (a line ending in an escaping backslash always continues), in order. Lines
    that are only blanks or comments between commands are dropped: they run nothing.
    `DatasetError` when the script's end leaves a command open."""
    commands: list[str] = []
    pending: list[str] = []
    for line in script.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending.append(line)
        text = "\n".join(pending)
        if _continues(line) or not whole(text + "\n"):
            continue
        commands.append(text)
        pending = []
    if pending:
        raise DatasetError(
            f"the solution ends inside a command bash cannot finish: "
            f"{pending[0]!r}...; fix solve.sh (`bash -n` says where)"
        )
    return tuple(commands)


def _continues(line: str) -> bool:
    """A line continued on the next by an odd run of backslashes at its end."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


# What an interactive shell (readline in a terminal, as openhands' and terminus-2's tmux
# panes run) does not take as typed text: a tab completes, another control character is
# a key, `!` expands history. A command holding one is typed as `eval $'...'`, where
# each is an escape.
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "!": "\\x21"}


def typed_command(command: str) -> str:
    """`command` as it can be typed into an interactive shell and do what it does in a
    script: itself, or, where it holds a tab, another control character or `!`, `eval`
    of it in ANSI-C quotes (one line; the shell's state, such as its directory and
    variables, still changes as the command changes it)."""
    if not any(c in "\t!" or (c < " " and c != "\n") or c == "\x7f" for c in command):
        return command
    quoted = "".join(
        _ESCAPES.get(c) or (f"\\x{ord(c):02x}" if c < " " or c == "\x7f" else c) for c in command
    )
    return f"eval $'{quoted}'"


def solution_edits(task_dir: Path, workdir: str | None = None) -> dict[str, str]:
    """The files the task's solution writes or changes in its workdir (`workdir`, the
    task's [environment].workdir; None: the sandboxes' default), by their path relative
    to it, with their new text: found by running solve.sh once in a scratch sandbox.
    `DatasetError` where that cannot be an agent's file edits: the solution fails,
    removes a file, leaves a file that is not text, or changes nothing."""
    inside = PurePosixPath(workdir) if workdir else DEFAULT_WORKDIR
    with tempfile.TemporaryDirectory(prefix="hr-solution-") as scratch:
        layout = Layout(root=Path(scratch) / "root", workdir=inside)
        prepare_root(layout)
        here = layout.root / inside.relative_to("/")
        environment = task_dir / "environment"
        if uploads_environment_dir(environment):
            shutil.copytree(environment, here, dirs_exist_ok=True)
        before = _contents(here)
        script = f"cd {inside} && {{\n{solution_script(task_dir)}\n}}"
        bwrap = shutil.which("bwrap") or "bwrap"
        ran = subprocess.run(
            init_argv(bwrap, layout, command=("/bin/bash", "-c", script)),
            capture_output=True,
            check=False,
            timeout=_RUN_TIMEOUT_S,
            env={"PATH": SANDBOX_PATH, "HOME": "/root", "LANG": "C.UTF-8"},
        )
        if ran.returncode != 0:
            raise DatasetError(
                f"{task_dir.name}'s solve.sh failed in a scratch sandbox (exit "
                f"{ran.returncode}): {ran.stderr.decode(errors='replace')[-500:]}"
            )
        after = _contents(here)
    return _edits(task_dir.name, inside, before, after)


def _contents(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _edits(
    task: str, workdir: PurePosixPath, before: dict[str, bytes], after: dict[str, bytes]
) -> dict[str, str]:
    """The written or changed files of `after` as text; refusals name what cannot be an
    edit."""
    gone = sorted(before.keys() - after.keys())
    if gone:
        raise DatasetError(
            f"{task}'s solution removes {', '.join(gone)}: whole-file edits "
            "cannot remove a file; give the task a solution that only writes"
        )
    edits: dict[str, str] = {}
    for name, content in after.items():
        if before.get(name) == content:
            continue
        try:
            edits[name] = content.decode()
        except UnicodeDecodeError:
            raise DatasetError(
                f"{task}'s solution leaves {name}, which is not UTF-8 text: "
                "whole-file edits carry text only"
            ) from None
    if not edits:
        raise DatasetError(
            f"{task}'s solution changes no file in {workdir}: an "
            "agent that only edits files has nothing to write"
        )
    return edits
