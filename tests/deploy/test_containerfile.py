"""The Containerfile's promises, read from the file (building takes minutes: scripts/build-image,
docs/container.md): more than one stage, a runtime that gets only the venv, a numeric non-root
user, every dependency at constraints.txt's version, no secret in the image, and a context that
still holds what the wheel is built from."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import re
import tomllib
from dataclasses import dataclass, field

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kernel.settings import PROJECT_ROOT

CONTAINERFILE = PROJECT_ROOT / "Containerfile"
IGNORE = PROJECT_ROOT / ".containerignore"
CONSTRAINTS = PROJECT_ROOT / "constraints.txt"
# The image's interpreter: Debian bookworm's python3 (scripts/build-image's base). Markers such
# as redis's `python_full_version < "3.11.3"` are decided by it, not by the host's Python.
IMAGE_PYTHON = "3.11.2"
SECRETISH = re.compile(r"secret|token|passw|private|credential|api_?key|jwt", re.IGNORECASE)


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, args = pending.partition(" ")
        found.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    assert not pending, "the Containerfile ends inside a continued line"
    return found


def _parse() -> tuple[list[tuple[str, str]], list[Stage]]:
    """The global ARGs before the first FROM, and the stages."""
    preamble: list[tuple[str, str]] = []
    stages: list[Stage] = []
    for keyword, args in _instructions(CONTAINERFILE.read_text()):
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?: AS (\S+))?", args, re.IGNORECASE)
            assert match, f"FROM {args}"
            stages.append(Stage(match[1], match[2] or str(len(stages))))
        elif stages:
            stages[-1].instructions.append((keyword, args))
        else:
            preamble.append((keyword, args))
    return preamble, stages


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_the_base_is_an_argument_defaulting_to_debian() -> None:
    preamble, stages = _parse()
    assert ("ARG", "BASE=docker.io/library/debian:bookworm-slim") in preamble
    assert stages[0].base == "${BASE}"
    names = [stage.name for stage in stages]
    # Every later stage grows from one before it, never from another registry image.
    assert all(stage.base in names[:i] for i, stage in enumerate(stages) if i > 0), names


def test_the_runtime_stage_gets_only_the_venv() -> None:
    _, stages = _parse()
    assert len(stages) >= 2
    build = next(stage for stage in stages if any("pip wheel" in a for a in stage.all("RUN")))
    runtime = stages[-1]
    assert runtime is not build and runtime.base != build.name
    copies = runtime.all("COPY") + runtime.all("ADD")
    assert copies == [f"--from={build.name} /opt/flashsale /opt/flashsale"]
    assert not any("pip" in run for run in runtime.all("RUN"))
    assert runtime.all("ENTRYPOINT") == ['["flashsale"]']
    assert json.loads(runtime.all("ENTRYPOINT")[0]) == ["flashsale"]  # exec form: signals reach it


def test_the_runtime_user_is_numeric_and_not_root() -> None:
    runtime = _parse()[1][-1]
    users = runtime.all("USER")
    assert users, "the runtime stage runs as root"
    uid, _, gid = users[-1].partition(":")
    # Numeric, so a kubelet can check runAsNonRoot without the image's /etc/passwd.
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert gid == "" or (gid.isdigit() and int(gid) != 0), users[-1]
    created = " ".join(runtime.all("RUN"))
    assert f"--uid {uid}" in created
    # Nothing after USER switches back.
    assert [kw for kw, _ in runtime.instructions].count("USER") == 1


def test_every_pip_step_reads_constraints_txt() -> None:
    build = _parse()[1]
    steps = [
        step
        for stage in build
        for run in stage.all("RUN")
        for step in run.split("&&")
        if re.search(r"\bpip (wheel|install)\b", step)
    ]
    assert any("pip wheel" in step for step in steps) and any("pip install" in s for s in steps)
    for step in steps:
        assert "-c constraints.txt" in step, step
    # The install takes only the wheels pip wheel resolved under the constraints.
    install = [step for step in steps if "pip install" in step]
    assert all("--no-index" in step for step in install), install


def _runtime_closure(environment: dict[str, str]) -> set[str]:
    """The distributions the package needs with no extras, under the image's interpreter, as far
    as the host's installed metadata can follow them."""
    seen: set[str] = set()
    todo = ["flashsale-gateway"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not on the host (its marker is false here): pinned or not, it ends here
        for line in requires:
            requirement = Requirement(line)
            extras = {"extra": ""}
            if requirement.marker is None or requirement.marker.evaluate(environment | extras):
                todo.append(requirement.name)
    return seen - {"flashsale-gateway"}


def _host_environment() -> dict[str, str]:
    return {key: str(value) for key, value in default_environment().items()}


def _image_environment() -> dict[str, str]:
    return _host_environment() | {"python_full_version": IMAGE_PYTHON, "python_version": "3.11"}


def test_constraints_pin_every_runtime_dependency_on_the_host() -> None:
    closure = _runtime_closure(_host_environment())
    assert {"starlette", "granian", "redis", "confluent-kafka"} <= closure
    assert sorted(closure - _pins().keys()) == []


def test_constraints_pin_every_runtime_dependency_in_the_image() -> None:
    # Debian's Python is 3.11.2, where redis also needs async-timeout: pinned as well.
    assert sorted(_runtime_closure(_image_environment()) - _pins().keys()) == []


def test_no_secret_goes_into_the_image() -> None:
    preamble, stages = _parse()
    everything = preamble + [pair for stage in stages for pair in stage.instructions]
    for keyword, args in everything:
        if keyword in {"ENV", "ARG", "LABEL"}:
            assert not SECRETISH.search(args), f"{keyword} {args}"
        if keyword in {"COPY", "ADD"}:
            assert not re.search(r"\.stack|\.env|\.pem|\.key|id_rsa", args), f"{keyword} {args}"
    # The dev secrets are accepted only where FLASHSALE_ENV is "local" (gateway/auth.py): an
    # image that set it would run with public keys.
    assert not any("FLASHSALE_ENV" in args for kw, args in everything if kw == "ENV")
    # A build-time CA bundle comes in as a secret mount, never through COPY.
    runs = [args for keyword, args in everything if keyword == "RUN"]
    assert all("--mount=type=secret" in run for run in runs if "PIP_CERT" in run)


def _ignored(patterns: list[str], path: str) -> bool:
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern.lstrip("!").strip("/")
        if fnmatch.fnmatch(path, body) or fnmatch.fnmatch(path, f"{body}/*"):
            ignored = not negated
    return ignored


def _ignore_patterns() -> list[str]:
    lines = IGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_context_leaves_out_state_and_secrets() -> None:
    patterns = _ignore_patterns()
    for path in (".stack", ".stack/keys/jwt.pem", ".env", ".env.prod", ".git", ".venv", "x.key"):
        assert _ignored(patterns, path), path
    # Docker reads .dockerignore only: the same file.
    assert (PROJECT_ROOT / ".dockerignore").resolve() == IGNORE.resolve()


def test_the_context_keeps_what_the_wheel_is_built_from() -> None:
    patterns = _ignore_patterns()
    setuptools = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    directories: dict[str, str] = setuptools["package-dir"]
    needed = {"pyproject.toml", "constraints.txt"}
    for package in setuptools["packages"]:
        needed.add(directories.get(package, package.replace(".", "/")))
    for path in sorted(needed):
        assert (PROJECT_ROOT / path).exists(), path
        assert not _ignored(patterns, path), f"{path} is left out of the build context"
    assert not _ignored(patterns, "lua/reserve.lua")
    assert not _ignored(patterns, "kernel/settings.py")


def test_a_pattern_matches_what_it_names() -> None:
    # The matcher the two tests above rely on, on both sides.
    assert _ignored([".git/", "!.git/keep"], ".git/config")
    assert not _ignored([".git/", "!.git/keep"], ".git/keep")
    assert not _ignored(["tests/"], "testsuite")
