"""The container image without a Docker engine: hadolint on the Dockerfile, and the Dockerfile's own two install
steps (scripts/image-install.sh build, then install from those wheels only, offline) run for real here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_runtime_stage_is_non_root_and_runs_the_watcher() -> None:
    text = DOCKERFILE.read_text()
    runtime = text[text.index("AS runtime") :]
    assert re.search(r"^USER \d+:\d+$", runtime, re.MULTILINE), "the runtime user must be numeric"
    assert 'ENTRYPOINT ["fightwatch", "run"]' in runtime
    assert not re.search(r"apt-get install|gcc|build-essential", runtime)


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    """.dockerignore admits only what it names: every COPY from the context must be named there."""
    admitted = {line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line[:1] == "!"}
    copied = []
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from") for word in words):
            copied += [source.rstrip("/") for source in words[1:-1]]
    assert copied
    missing = [source for source in copied if not any(source == a or source.startswith(a + "/") for a in admitted)]
    assert not missing, f"COPY of paths .dockerignore leaves out of the build context: {missing}"


def test_the_build_stage_installs_every_crate_the_native_engine_is_built_from() -> None:
    """The image's build stage and scripts/native.sh (what `make` runs) install the same Debian crates: one more
    in native/Cargo.toml and only one of them would break the image's build."""
    listed = re.search(r"CRATES=\(([^)]*)\)", (REPO / "scripts" / "native.sh").read_text())
    assert listed is not None
    crates = {word for word in listed.group(1).split() if word.startswith("librust-")}
    build = DOCKERFILE.read_text().split("AS runtime")[0]
    installed = set(re.findall(r"librust-[\w-]+", build))
    assert crates == installed
    dependencies = (REPO / "native" / "Cargo.toml").read_text().split("[dependencies]")[1].split("[")[0]
    packages = {"serde": "librust-serde-derive-dev"}  # (serde with its derive feature; that package needs serde's)
    for crate in re.findall(r"^(\w+) =", dependencies, re.MULTILINE):
        assert packages.get(crate, f"librust-{crate.replace('_', '-')}-dev") in crates, crate


def test_the_image_install_steps_build_a_working_fightwatch(tmp_path: Path) -> None:
    text = DOCKERFILE.read_text()
    assert "scripts/image-install.sh build /wheels" in text
    assert "image-install.sh install /wheels /opt/fightwatch" in text
    script = REPO / "scripts" / "image-install.sh"
    wheels, prefix = tmp_path / "wheels", tmp_path / "opt"
    # Debian's own toolchain only, as in the image's build stage: its cargo (Rust 1.63) builds the native engine.
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHON": sys.executable,
        "HOME": str(tmp_path),
        "CARGO_TARGET_DIR": str(tmp_path / "target"),
    }
    build = subprocess.run(
        [str(script), "build", str(wheels)], cwd=REPO, capture_output=True, text=True, env=env, check=False
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("fightwatch-*.whl")
    assert not wheel.name.endswith("-none-any.whl"), f"{wheel.name}: the per-event modules were not compiled"
    install = subprocess.run(
        [str(script), "install", str(wheels), str(prefix)], capture_output=True, text=True, env=env, check=False
    )
    assert install.returncode == 0, install.stderr[-3000:]
    assert list(prefix.glob("lib/python*/site-packages/watcher/detection/engine.*.so")), "no compiled engine"
    assert list(prefix.glob("lib/python*/site-packages/watcher/_native.*.so")), "no native engine"
    version = subprocess.run(
        [str(prefix / "bin" / "fightwatch"), "--version"], capture_output=True, text=True, check=False
    )
    assert "compiled with mypyc, engine: native" in version.stdout, version.stdout + version.stderr
    demo = subprocess.run(
        [str(prefix / "bin" / "fightwatch"), "demo", "--output", "json"], capture_output=True, check=False
    )
    assert demo.returncode == 0, demo.stderr
    assert b'"type":"fight"' in demo.stdout.replace(b" ", b"")
