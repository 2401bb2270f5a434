"""The scripted driver on solution shapes no sample task has: heredocs (quoted, plain,
tab-stripped), printf with escapes, several commands, quotes across lines, tabs,
continuations, compound commands and non-ASCII text, cut into commands by bash and
played as edits from a scratch sandbox run. Cheap: bash -n and one bwrap per case."""
# The non-ASCII letters and dashes are the shapes under test, not look-alike typos.
# ruff: noqa: RUF001

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harbor_ray.errors import DatasetError
from harbor_ray.qualify.script import scripted_engine, whole_file_edits
from harbor_ray.qualify.solution import solution_edits, split_commands, typed_command

# Each command as bash ends it, in order; the script is them joined by newlines, with a
# comment and blank lines between that run nothing.
COMMANDS = (
    "set -e",
    "mkdir -p /app/out",
    "cat > /app/out/notes.md <<'EOF'\n# not a comment: file text\n$HOME stays `as is`\nEOF",
    "cat > /app/plain.txt <<EOF\nhome is $((1 + 1)) 'quoted'\nEOF",
    "cat <<-END > /app/tabbed.txt\n\tstripped\tinside kept\n\tEND",
    "printf 'caf\\u00e9\\t%s\\n' \"naïve – ünïcødé\" > /app/printf.txt",
    "printf '%s\\n' 'it'\"'\"'s' \"say \\\"hi\\\"\" >> /app/printf.txt",
    'echo "a quote that spans\ntwo lines; not a new command" > /app/spans.txt',
    "echo one && \\\n  echo two > /app/cont.txt",
    "if [ -d /app/out ]; then\n  echo yes > /app/if.txt\nelse\n  echo no > /app/if.txt\nfi",
    'for word in α β; do echo "$word"; done > /app/loop.txt',
    "case x in\n  x) echo matched > /app/case.txt ;;\n  *) exit 1 ;;\nesac",
    "python3 - <<'PY'\nopen('/app/py.txt', 'w').write('\u00fc\\tü\\n')\nPY",
    "echo a; echo b | tr a-z A-Z > /app/pipe.txt",
)
# printf's \\u needs a UTF-8 locale, whatever the machine's.
SHELL_ENV = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
SCRIPT = "\n\n# set up, then write\n".join(COMMANDS[:2]) + "\n" + "\n".join(COMMANDS[2:])


def test_bash_cuts_every_shape_where_the_shell_ends_it() -> None:
    assert split_commands(SCRIPT) == COMMANDS


def test_each_command_is_whole_and_together_they_do_what_the_script_does(
    tmp_path: Path,
) -> None:
    # Run in a sandbox-free stand-in: /app rewritten to a scratch directory each way.
    def run(script: str, where: Path) -> dict[str, str]:
        where.mkdir()
        subprocess.run(
            ["bash", "-c", script.replace("/app", str(where))],
            check=True,
            capture_output=True,
            env=SHELL_ENV,
        )
        return {
            p.relative_to(where).as_posix(): p.read_text()
            for p in sorted(where.rglob("*"))
            if p.is_file()
        }

    commands = split_commands(SCRIPT)
    for command in commands:
        assert (
            subprocess.run(["bash", "-n"], input=command.encode(), capture_output=True).stderr
            == b""
        ), command
    whole = run(SCRIPT, tmp_path / "whole")
    assert run("\n".join(commands), tmp_path / "split") == whole
    assert whole["printf.txt"] == 'café\tnaïve – ünïcødé\nit\'s\nsay "hi"\n'
    assert whole["tabbed.txt"] == "stripped\tinside kept\n"


def files_in(where: Path) -> dict[str, str]:
    return {
        p.relative_to(where).as_posix(): p.read_text()
        for p in sorted(where.rglob("*"))
        if p.is_file()
    }


def typed_into_a_terminal(lines: list[str], where: Path) -> None:
    """`lines` typed into an interactive bash on a terminal (readline on, as in the
    tmux panes openhands and terminus-2 type into), then `exit`."""
    main, terminal = os.openpty()
    shell = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        cwd=where,
        start_new_session=True,
        env={
            **SHELL_ENV,
            "HOME": str(where),
            "HISTFILE": "/dev/null",
            "TERM": "xterm",
            "PS1": "$ ",
        },
    )
    os.close(terminal)
    os.write(main, "".join(line + "\n" for line in [*lines, "exit"]).encode())
    while True:  # drain what it prints until the terminal closes with the shell
        try:
            if not os.read(main, 65536):
                break
        except OSError:
            break
    os.close(main)
    assert shell.wait(timeout=60) == 0


def test_typed_into_an_interactive_shell_the_commands_do_what_the_script_does(
    tmp_path: Path,
) -> None:
    # A tab in a heredoc, typed as is, completes a name instead (openhands-sdk's notes
    # lost their tab): the typed form escapes it, and `!`, inside an eval.
    script = SCRIPT + "\necho 'bang!' \"wow!\" > /app/bang.txt"
    (tmp_path / "script").mkdir()
    subprocess.run(
        ["bash", "-c", script.replace("/app", str(tmp_path / "script"))],
        check=True,
        capture_output=True,
        env=SHELL_ENV,
    )
    (tmp_path / "typed").mkdir()
    typed = [
        typed_command(c) for c in split_commands(script.replace("/app", str(tmp_path / "typed")))
    ]
    assert all("\t" not in line and "!" not in line for line in typed)
    typed_into_a_terminal(typed, tmp_path / "typed")
    assert files_in(tmp_path / "typed") == files_in(tmp_path / "script")
    assert files_in(tmp_path / "typed")["tabbed.txt"] == "stripped\tinside kept\n"


def test_a_command_without_keys_a_terminal_takes_is_typed_as_it_is() -> None:
    assert typed_command(COMMANDS[1]) == COMMANDS[1]
    assert typed_command(COMMANDS[2]) == COMMANDS[2]  # newlines: the shell's PS2 takes them


def test_one_line_of_several_commands_is_one_command() -> None:
    # What openhands' bashlex counts as one: `;`, `&&` and pipes on one line.
    assert split_commands("a; b && c | d\ne") == ("a; b && c | d", "e")


@pytest.mark.parametrize(
    "script",
    ["echo 'open", "if true; then\n  echo x", "cat <<EOF\nno end", "echo a &&", "echo a \\"],
)
def test_a_script_that_ends_inside_a_command_is_refused(script: str) -> None:
    with pytest.raises(DatasetError, match="bash -n"):
        split_commands(script)


def make_task(root: Path, solve: str, environment: dict[str, str] | None = None) -> Path:
    task = root / "held-out"
    (task / "solution").mkdir(parents=True)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    for name, text in (environment or {}).items():
        (task / "environment" / name).parent.mkdir(parents=True, exist_ok=True)
        (task / "environment" / name).write_text(text)
    return task


def test_the_edits_are_the_files_the_solution_writes_or_changes(tmp_path: Path) -> None:
    task = make_task(
        tmp_path,
        SCRIPT.replace("echo yes", "cat kept.txt >>/app/data.txt; echo yes"),
        {"kept.txt": "untouched\n", "data.txt": "bären\n"},
    )
    edits = solution_edits(task)
    assert "kept.txt" not in edits  # unchanged: no edit
    assert edits["data.txt"] == "bären\nuntouched\n"  # changed, run in the task's workdir
    assert edits["printf.txt"] == 'café\tnaïve – ünïcødé\nit\'s\nsay "hi"\n'
    assert edits["out/notes.md"] == "# not a comment: file text\n$HOME stays `as is`\n"
    assert edits["plain.txt"] == "home is 2 'quoted'\n"
    assert edits["py.txt"] == "ü\tü\n"


def test_the_edits_are_relative_to_the_task_s_workdir(tmp_path: Path) -> None:
    # [environment].workdir: its environment/ is copied there, and solve.sh runs there.
    task = make_task(
        tmp_path, "printf 'x\\n' > /srv/site/a.txt; cat b.txt >> a.txt\n", {"b.txt": "b\n"}
    )
    assert solution_edits(task, "/srv/site") == {"a.txt": "x\nb\n"}


@pytest.mark.parametrize(
    ("solve", "environment", "why"),
    [
        ("rm /app/old.txt\n", {"old.txt": "x"}, "removes old.txt"),
        ("mkdir -p /app/empty\n", {}, "changes no file"),
        ("printf '\\377' > /app/bin\n", {}, "not UTF-8"),
        ("echo nope >&2; exit 3\n", {}, "exit 3.*nope"),
    ],
)
def test_a_solution_that_cannot_be_edits_is_refused_with_why(
    tmp_path: Path, solve: str, environment: dict[str, str], why: str
) -> None:
    with pytest.raises(DatasetError, match=why):
        solution_edits(make_task(tmp_path, solve, environment))


async def test_aider_gets_a_printf_only_solution_as_edits(tmp_path: Path) -> None:
    # The shape that gave aider "Empty response received from LLM": no files shipped
    # with the task, only a printf.
    task = make_task(tmp_path, "printf 'x\\ty – ✓\\n' > /app/answer.txt\n")
    reply = await scripted_engine("aider", task).complete(
        {"messages": [{"role": "user", "content": "task"}]}
    )
    text = reply["choices"][0]["message"]["content"]
    assert text == whole_file_edits({"answer.txt": "x\ty – ✓\n"}) != ""


@pytest.mark.parametrize(
    ("agent", "tool", "extra"),
    [
        ("openhands-sdk", "terminal", {}),
        ("openhands", "execute_bash", {"security_risk": "LOW"}),
    ],
)
async def test_one_command_tools_get_one_call_per_command(
    tmp_path: Path, agent: str, tool: str, extra: dict[str, str]
) -> None:
    # The shape that gave openhands-sdk "Cannot execute multiple commands at once".
    script = scripted_engine(agent, make_task(tmp_path, SCRIPT)).tool_script
    assert script is not None
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {}}} for n in (tool, "finish")
    ]
    history: list[dict[str, str]] = [{"role": "user", "content": "go"}]
    sent = []
    for _ in COMMANDS:
        ((name, arguments),) = script(history, tools).tool_calls
        assert name == tool and arguments == {"command": arguments["command"], **extra}
        sent.append(arguments["command"])
        history += [{"role": "assistant", "content": ""}, {"role": "tool", "content": ""}]
    assert tuple(sent) == tuple(map(typed_command, COMMANDS))
    assert sent[COMMANDS.index(next(c for c in COMMANDS if "\t" in c))].startswith("eval $'")
    # Then the agent's ending (text, or openhands' finish call): no shell call again.
    assert all(name != tool for name, _ in script(history, tools).tool_calls)


async def test_other_shell_tools_get_the_whole_script_in_one_call(tmp_path: Path) -> None:
    script = scripted_engine("codex", make_task(tmp_path, SCRIPT)).tool_script
    assert script is not None
    tools = [{"type": "function", "function": {"name": "exec_command", "parameters": {}}}]
    ((_, arguments),) = script([{"role": "user", "content": "go"}], tools).tool_calls
    assert arguments == {"cmd": SCRIPT}
    assert json.loads(json.dumps(arguments)) == arguments
